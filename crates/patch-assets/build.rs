// Rebuild when anything under assets/ changes, so the embedded copy is never stale.
fn main() {
    println!("cargo:rerun-if-changed=../../assets");
}
