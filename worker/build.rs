//! Gives `lavender-worker` an rpath to libtorch's lib/ folder, so the binary runs
//! without LD_LIBRARY_PATH. torch-sys passes `-Wl,-rpath` only to its own C++ shim,
//! not to the final link, but it exports the folder it linked against (links = "tch"
//! makes that DEP_TCH_LIBTORCH_LIB here).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    match std::env::var("DEP_TCH_LIBTORCH_LIB") {
        Ok(lib) if !lib.is_empty() && target_os != "windows" => {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
            // The device probe loads libtorch_cuda from the same folder on demand.
            println!("cargo:rustc-env=LAVENDER_LIBTORCH_LIB={lib}");
        }
        _ => println!("cargo:rustc-env=LAVENDER_LIBTORCH_LIB="),
    }
}
