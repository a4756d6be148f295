# Every node kind that can hold a Name, for the walker test against CPython's ast.walk.
import os as operating_system
from collections import OrderedDict as OD


@decorator_name(decorator_arg, key=decorator_kw)
def function(a: AnnA, /, b: AnnB = default_b, *args: AnnArgs, c: AnnC = default_c, **kw: AnnKw) -> Ret:
    global global_name
    nonlocal_user = a
    del deleted_name
    x: AnnX = value_x
    y += aug_value
    return_value = (lambda la=lambda_default, *lv, lk=lk_default, **lkw: la + lambda_body)(call_arg)
    return return_value


async def coroutine(p=async_default):
    async with async_ctx(ctx_arg) as async_target:
        await awaited(async_target)
    async for item in async_iter:
        yield item
    result = [comp_elt async for comp_elt in async_source if comp_cond]
    yield from delegated


class Klass(BaseOne, base_two.attr, metaclass=Meta, **class_kwargs):
    attr: ClassAnn = class_value

    def method(self, arg=method_default):
        return self.attr[index_name:upper_name:step_name]


with ctx_one as (t1, t2), ctx_two(with_arg=with_kw) as t3:
    pass

for for_target, (for_a, for_b) in for_iter:
    continue
else:
    for_else_name

while while_cond:
    break
else:
    while_else_name

if if_cond:
    body_name
elif elif_cond:
    elif_body
else:
    else_body

try:
    try_body
except (ErrorOne, ErrorTwo) as caught:
    handler_body
else:
    try_else
finally:
    final_name

try:
    star_try
except* GroupError:
    star_handler

try:
    plain_try
except ValueError:
    raise NewError(raise_arg) from cause_name

assert assert_test, assert_msg

match subject:
    case [first, *rest] if guard_name:
        case_body_one
    case {"key": mapped, **rest_map}:
        case_body_two
    case Point(x=px, y=py) | Other(po):
        case_body_three
    case constant_value.attr:
        case_body_four
    case _:
        case_body_default

values = {dict_key: dict_value, **dict_unpack}
sets = {set_elt, *set_unpack}
lists = [list_elt, *list_unpack]
tuples = tuple_a, tuple_b
gen = (gen_elt for gen_target in gen_iter if gen_cond)
setc = {setc_elt for setc_target in setc_iter}
dictc = {dk: dv for dk, dv in dict_iter.items() if dict_cond}
nested = [[inner for inner in outer] for outer in outer_iter]
walrus = (named := named_value)
ternary = if_true if ternary_test else if_false
boolean = bool_a and bool_b or not bool_c
compare = cmp_a < cmp_b <= cmp_c is not cmp_d in cmp_e
binop = (bin_a + bin_b) * -unary_c @ mat_d
fstring = f"{fstr_value!r:>{fstr_width}} and {fstr_other}"
starred_call = func_name(*star_args, **star_kwargs, keyword=kw_value)
sliced = seq[lower_only:]
subscripted = mapping[sub_key][sub_two, sub_three]
attribute_chain = obj.first.second(chain_arg).third
ellipsis_and_consts = (..., None, True, 1, 2.5, 3j, b"bytes", "text")
