//! Finds libmooncake.so and the C headers, links the library, and generates the raw bindings of
//! every section of the C ABI with bindgen (OUT_DIR/bindings.rs, included by src/lib.rs).
//!
//! MOONCAKE_STORE_LIB_DIR: the directory holding libmooncake.so (default: the repository's
//! python/mooncake, where `make lib` builds it). MOONCAKE_STORE_INCLUDE_DIR: the directory holding
//! mooncake.h and its section headers (default: the repository's capi/include).
//!
//! Dependents get both directories as links metadata (`links = "mooncake"`): their build scripts
//! read DEP_MOONCAKE_LIB_DIR and DEP_MOONCAKE_INCLUDE_DIR.

use std::path::{Path, PathBuf};

fn dir_from_env(var: &str, default: &Path) -> PathBuf {
    println!("cargo:rerun-if-env-changed={}", var);
    let dir = std::env::var_os(var)
        .map(PathBuf::from)
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

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.join("..").join("..");
    let lib_dir = dir_from_env(
        "MOONCAKE_STORE_LIB_DIR",
        &root.join("python").join("mooncake"),
    );
    let inc_dir = dir_from_env(
        "MOONCAKE_STORE_INCLUDE_DIR",
        &root.join("capi").join("include"),
    );

    let lib = lib_dir.join("libmooncake.so");
    if !lib.exists() {
        panic!(
            "{} does not exist: build it with `make lib` at the repository root, or point \
             MOONCAKE_STORE_LIB_DIR at the directory that holds it",
            lib.display()
        );
    }
    println!("cargo:rerun-if-changed={}", lib.display());
    // Both reach every binary that links a dependent crate.
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mooncake");
    // An rpath for this package's own test binary; a link argument does not reach dependents,
    // which add their own from DEP_MOONCAKE_LIB_DIR.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    // The LIB_DIR constant: where the library was found at build time.
    println!(
        "cargo:rustc-env=MOONCAKE_STORE_LIB_DIR={}",
        lib_dir.display()
    );
    // Links metadata: DEP_MOONCAKE_LIB_DIR / DEP_MOONCAKE_INCLUDE_DIR in dependents' build scripts.
    println!("cargo:lib_dir={}", lib_dir.display());
    println!("cargo:include_dir={}", inc_dir.display());

    let common = inc_dir.join("mooncake.h");
    let sections = ["mooncake_engine.h", "mooncake_pg.h", "mooncake_store.h"];
    println!("cargo:rerun-if-changed={}", common.display());
    for s in sections {
        println!("cargo:rerun-if-changed={}", inc_dir.join(s).display());
    }
    // mooncake.h declares mooncake_last_error/mooncake_version/mc_host_* and includes every
    // section; everything the library exports is kept (mooncake_* and mc_*), nothing from the
    // system headers.
    let bindings = bindgen::Builder::default()
        .header(common.to_string_lossy())
        .clang_arg(format!("-I{}", inc_dir.display()))
        .allowlist_function("mooncake_.*")
        .allowlist_function("mc_.*")
        .allowlist_type("mc_.*")
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen on {}: {}", common.display(), e));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("writing {}: {}", out.display(), e));
}
