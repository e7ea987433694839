// Adds libinfer's folder (found by infer-sys) as an rpath of this crate's
// tests and examples, so they run from a build tree or a non-system prefix
// without LD_LIBRARY_PATH. Applications set their own rpath or install
// libinfer where the loader looks.
fn main() {
    if let Ok(dir) = std::env::var("DEP_INFER_LIB_DIR") {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", dir);
        println!("cargo:rustc-link-arg-examples=-Wl,-rpath,{}", dir);
    }
}
