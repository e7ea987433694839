// Links libinfer.so. Where it is found, in order:
//   INFER_LIB_DIR        a folder holding libinfer.so (a build tree or PREFIX/lib)
//   the source checkout  ../../../build*/libinfer.so (this crate lives in bindings/rust)
//   the system           the linker's default search path
// The folder is passed on to dependent crates (DEP_INFER_LIB_DIR), whose build
// scripts may add it as an rpath (the `infer` crate does, for its tests and
// examples).
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=INFER_LIB_DIR");
    let mut dir: Option<PathBuf> = env::var_os("INFER_LIB_DIR").map(PathBuf::from);
    if dir.is_none() {
        let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
        if let Some(repo) = manifest.ancestors().nth(3) {
            let mut builds: Vec<PathBuf> = std::fs::read_dir(repo)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .map(|e| e.path())
                        .filter(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .map_or(false, |n| n.starts_with("build"))
                                && p.join("libinfer.so").exists()
                        })
                        .collect()
                })
                .unwrap_or_default();
            builds.sort();
            dir = builds.into_iter().next();
        }
    }
    if let Some(d) = dir {
        println!("cargo:rustc-link-search=native={}", d.display());
        println!("cargo:lib_dir={}", d.display());
    }
    println!("cargo:rustc-link-lib=dylib=infer");
}
