//! An rpath to libmooncake.so's directory for this package's test, example and bench binaries,
//! so they run without LD_LIBRARY_PATH. mooncake-sys links the library and passes its directory
//! on as links metadata; Cargo does not pass its link arguments on to dependents.
fn main() {
    let dir =
        std::env::var("DEP_MOONCAKE_LIB_DIR").expect("DEP_MOONCAKE_LIB_DIR (set by mooncake-sys)");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    // Rerun when the directory changes (mooncake-sys's metadata) or this file does, not on
    // every change to the package's sources.
    println!("cargo:rerun-if-changed=build.rs");
}
