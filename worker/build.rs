//! Gives `lavender-worker` an rpath to libtorch's lib/ folder, so the binary runs
//! without LD_LIBRARY_PATH. torch-sys passes `-Wl,-rpath` only to its own C++ shim,
//! not to the final link, but it exports the folder it linked against (links = "tch"
//! makes that DEP_TCH_LIBTORCH_LIB here).
//!
//! Also compiles `src/native/shim.cpp`, the libtorch calls tch does not bind
//! (autocast on every device, TF32, gradient buffers, non-blocking copies, events),
//! against the headers beside that lib/ folder.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo:rerun-if-changed=src/native/shim.cpp");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB").unwrap_or_default();
    if !lib.is_empty() && target_os != "windows" {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        // The device probe loads libtorch_cuda from the same folder on demand.
        println!("cargo:rustc-env=LAVENDER_LIBTORCH_LIB={lib}");
    } else {
        println!("cargo:rustc-env=LAVENDER_LIBTORCH_LIB=");
    }
    // libtorch's layout, from a libtorch zip or the torch wheel: lib/ and include/ side by side.
    let include = Path::new(&lib)
        .parent()
        .map(|root| root.join("include"))
        .filter(|dir| dir.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no libtorch include/ folder beside {lib:?} (DEP_TCH_LIBTORCH_LIB from torch-sys)"
            )
        });
    // The same C++ ABI as torch-sys's own shim (libtorch wheels use the CXX11 one).
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("src/native/shim.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .warnings(false);
    if target_os == "windows" {
        build.flag("/std:c++17");
    } else {
        build
            .flag("-std=c++17")
            .flag("-w")
            .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"));
    }
    build.compile("lavender_native");
}
