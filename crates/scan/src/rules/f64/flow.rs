//! How `P_F64`'s float64 numpy arrays travel beyond one expression: conversions bound to a
//! local name that a later statement takes to the device. (Arrays kept on `self` by one method
//! and converted by another are followed with [`crate::analysis::self_attr_values`].)

use crate::analysis;
use crate::source::ast::{Expr, Stmt};

/// The conversion at `occ` is the whole value of `name = <conversion>`: the local name it is
/// bound to.
pub(super) fn bound_name<'a>(occ: &analysis::Occurrence<'a>) -> Option<&'a str> {
    let analysis::Node::Stmt(Stmt::Assign(assign)) = occ.ancestors.last()? else {
        return None;
    };
    match (assign.targets.as_slice(), assign.value.as_ref()) {
        ([Expr::Name(n)], value) if std::ptr::eq(value, occ.expr) => Some(n.id.as_str()),
        _ => None,
    }
}
