// Shared by the crates' build scripts (each includes it with `include!`): finds libmooncake.so
// and the C headers, links the library with an rpath, and generates raw bindings with bindgen
// for one section of the C ABI.
//
// MOONCAKE_STORE_LIB_DIR: the directory holding libmooncake.so (default: the repository's
// python/mooncake, where `make lib` builds it). MOONCAKE_STORE_INCLUDE_DIR: the directory holding
// mooncake.h and the section's header (default: the repository's capi/include). The test, example
// and bench binaries of a crate get an rpath to the library directory, so they run without
// LD_LIBRARY_PATH; see README.md for binaries of crates that depend on these ones.

fn dir_from_env(var: &str, default: &std::path::Path) -> std::path::PathBuf {
    println!("cargo:rerun-if-env-changed={}", var);
    let dir = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| default.to_path_buf());
    dir.canonicalize().unwrap_or_else(|e| {
        panic!(
            "{} ({}): {}; build libmooncake.so with `make lib` at the repository root, \
             or set MOONCAKE_STORE_LIB_DIR and MOONCAKE_STORE_INCLUDE_DIR",
            var,
            dir.display(),
            e
        )
    })
}

/// Links libmooncake.so and writes bindings.rs to OUT_DIR from mooncake.h, keeping the
/// functions matching `functions` (besides mooncake_last_error and mooncake_version) and the
/// types in `types`; `section` is the header those functions live in.
fn link_and_bind(section: &str, functions: &str, types: &[&str]) {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.join("..").join("..");
    let lib_dir = dir_from_env("MOONCAKE_STORE_LIB_DIR", &root.join("python").join("mooncake"));
    let inc_dir = dir_from_env("MOONCAKE_STORE_INCLUDE_DIR", &root.join("capi").join("include"));

    let lib = lib_dir.join("libmooncake.so");
    if !lib.exists() {
        panic!(
            "{} does not exist: build it with `make lib` at the repository root, or point \
             MOONCAKE_STORE_LIB_DIR at the directory that holds it",
            lib.display()
        );
    }
    println!("cargo:rerun-if-changed={}", lib.display());
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mooncake");
    // Tests, examples and benches of this package find the library without LD_LIBRARY_PATH.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    // The crate's LIB_DIR constant: where the library was found at build time.
    println!("cargo:rustc-env=MOONCAKE_STORE_LIB_DIR={}", lib_dir.display());

    let header = inc_dir.join(section);
    let common = inc_dir.join("mooncake.h");
    for h in [&header, &common] {
        println!("cargo:rerun-if-changed={}", h.display());
    }
    // mooncake.h declares mooncake_last_error()/mooncake_version() and includes every section;
    // only this section's functions and types are kept.
    let mut b = bindgen::Builder::default()
        .header(common.to_string_lossy())
        .clang_arg(format!("-I{}", inc_dir.display()))
        .allowlist_function(functions)
        .allowlist_function("mooncake_last_error")
        .allowlist_function("mooncake_version")
        .layout_tests(false);
    for t in types {
        b = b.allowlist_type(t);
    }
    let bindings = b
        .generate()
        .unwrap_or_else(|e| panic!("bindgen on {}: {}", common.display(), e));
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("writing {}: {}", out.display(), e));
}
