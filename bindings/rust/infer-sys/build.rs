// Links libinfer.so. Where it is found, in order:
//   INFER_LIB_DIR        a folder holding libinfer.so (a build tree or PREFIX/lib)
//   pkg-config           `pkg-config --libs infer`: an installed libinfer (cmake
//                        --install ships PREFIX/lib/pkgconfig/infer.pc; set
//                        PKG_CONFIG_PATH for a prefix pkg-config does not search)
//   the source checkout  ../../../build*/libinfer.so (this crate lives in bindings/rust)
// Nothing found is a build error that says what to set.
// The folder is passed on to dependent crates (DEP_INFER_LIB_DIR), whose build
// scripts may add it as an rpath (the `infer` crate does, for its tests and
// examples).
use std::env;
use std::path::PathBuf;
use std::process::Command;

// What pkg-config says about `infer`: (search folders, libraries), or why not.
fn pkg_config() -> Result<(Vec<PathBuf>, Vec<String>), String> {
    let exe = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&exe)
        .args(["--libs", "infer"])
        .output()
        .map_err(|e| format!("`{} --libs infer` could not run: {}", exe, e))?;
    if !out.status.success() {
        return Err(format!(
            "`{} --libs infer` failed: {}",
            exe,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut dirs = Vec::new();
    let mut libs = Vec::new();
    for flag in text.split_whitespace() {
        if let Some(d) = flag.strip_prefix("-L") {
            dirs.push(PathBuf::from(d));
        } else if let Some(l) = flag.strip_prefix("-l") {
            libs.push(l.to_string());
        }
    }
    if !libs.iter().any(|l| l == "infer") {
        return Err(format!("`{} --libs infer` printed no -linfer: {}", exe, text.trim()));
    }
    // pkg-config leaves out system folders (-L/usr/lib...): ask for libdir.
    if dirs.is_empty() {
        if let Ok(o) = Command::new(&exe).args(["--variable=libdir", "infer"]).output() {
            let d = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && !d.is_empty() {
                dirs.push(PathBuf::from(d));
            }
        }
    }
    Ok((dirs, libs))
}

fn checkout_build() -> Option<PathBuf> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").ok()?);
    let repo = manifest.ancestors().nth(3)?;
    let mut builds: Vec<PathBuf> = std::fs::read_dir(repo)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .map_or(false, |n| n.starts_with("build"))
                && p.join("libinfer.so").exists()
        })
        .collect();
    builds.sort();
    builds.into_iter().next()
}

fn link_dir(d: &PathBuf) {
    println!("cargo:rustc-link-search=native={}", d.display());
    println!("cargo:lib_dir={}", d.display());
}

fn main() {
    println!("cargo:rerun-if-env-changed=INFER_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    if let Some(d) = env::var_os("INFER_LIB_DIR").map(PathBuf::from) {
        link_dir(&d);
        println!("cargo:rustc-link-lib=dylib=infer");
        return;
    }
    let pc_error = match pkg_config() {
        Ok((dirs, libs)) => {
            if let Some(d) = dirs.first() {
                link_dir(d);
            }
            for d in dirs.iter().skip(1) {
                println!("cargo:rustc-link-search=native={}", d.display());
            }
            for l in libs {
                println!("cargo:rustc-link-lib=dylib={}", l);
            }
            return;
        }
        Err(e) => e,
    };
    if let Some(d) = checkout_build() {
        link_dir(&d);
        println!("cargo:rustc-link-lib=dylib=infer");
        return;
    }
    panic!(
        "\n\ninfer-sys: libinfer.so not found.\n  \
         INFER_LIB_DIR is not set,\n  \
         {},\n  \
         and no build*/libinfer.so in the source checkout.\n\
         Set INFER_LIB_DIR to the folder holding libinfer.so (a build tree or PREFIX/lib), or\n\
         install libinfer (cmake --install BUILD --prefix PREFIX) and, for a prefix pkg-config\n\
         does not search, set PKG_CONFIG_PATH=PREFIX/lib/pkgconfig.\n\n",
        pc_error
    );
}
