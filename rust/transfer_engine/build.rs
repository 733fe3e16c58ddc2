//! Generates the raw bindings of the engine section of the C ABI with bindgen and links
//! libmooncake.so (the shared steps: ../common/build_common.rs).
include!("../common/build_common.rs");

fn main() {
    link_and_bind("mooncake_engine.h", "mc_engine_.*", &[]);
}
