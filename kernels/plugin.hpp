// Plugin kernels: shared libraries that register kernels through the C ABI of include/pacheck/kernel_abi.h,
// loaded with dlopen and wrapped as ordinary Kernels, so they get every verdict, property and report the
// built-in kernels get.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"

namespace pacheck {

/// A plugin library that cannot be used. what() reads "plugin 'LIBRARY': PROBLEM", e.g.
/// "plugin 'build/libfoo.so': kernel #0 ('foo.v1'): run is NULL". Nothing of the library was registered.
struct PluginError : std::runtime_error {
  PluginError(std::string library, std::string problem);
  std::string library;  ///< the path as given
  std::string problem;  ///< what is wrong, without the library prefix
};

/// The largest plugin library pacheck loads (and hashes): far above any kernel library, so a huge file named
/// by mistake is refused at once instead of being read whole for its SHA-256.
inline constexpr std::uint64_t kMaxPluginBytes = std::uint64_t{4} << 30;

/// A loaded plugin library, for reports (issue 8's environment fingerprint).
struct PluginInfo {
  std::string path;                  ///< as given on the command line
  std::string resolved_path;         ///< absolute path of the file that was loaded
  std::string sha256;                ///< SHA-256 of the library file, 64 lower-case hex digits
  std::uint32_t abi_version = 0;     ///< the library's pacheck_plugin_abi_version
  std::vector<std::string> kernels;  ///< names it registered, in registration order
};

/// Loads the plugin at `path` and adds its kernels to `reg`, all or none. A path without '/' is taken
/// relative to the working directory (not searched for on the library path), so `--plugin libx.so` means
/// ./libx.so. Before the file is hashed or opened by dlopen it must be a regular file of at most
/// kMaxPluginBytes that starts with the ELF magic ("cannot load: ..." otherwise). Throws PluginError for: a
/// missing or unloadable file, a missing symbol
/// (pacheck_plugin_abi_version, pacheck_register_kernels), an ABI version other than PACHECK_ABI_VERSION,
/// a registration that fails or adds no kernel, an invalid descriptor (naming the kernel and field), or a
/// kernel name already in `reg` or registered twice by the library.
PluginInfo load_plugin(const std::string& path, Registry& reg);

/// Registers the kernels of a registration function linked into this process (a kernel's own test binary,
/// include/pacheck/gtest.hpp) exactly as load_plugin registers a library's, without dlopen: the same
/// registrar, descriptor validation, all-or-none and duplicate-name rules. `label` stands for the library in
/// messages and is what plugin_path_of() gives for these kernels (so printed repro lines carry
/// `--plugin LABEL`: pass the path of a plugin built from the same code). `abi_version` is the
/// pacheck_plugin_abi_version the code was compiled with. Not listed by loaded_plugins() (there is no file
/// to hash). Throws PluginError as load_plugin does, and for a NULL `reg_fn` or a version out of range.
PluginInfo add_linked_kernels(const std::string& label, pacheck_register_kernels_fn reg_fn, std::uint32_t abi_version,
                              Registry& reg = Registry::global());

/// Loads each path in order with load_plugin; stops at the first error (kernels of earlier libraries stay
/// registered; the CLI exits at once anyway). Returns the infos of the libraries loaded by this call.
std::vector<PluginInfo> load_plugins(const std::vector<std::string>& paths, Registry& reg = Registry::global());

/// Every plugin loaded so far in this process (into any registry), in load order.
std::vector<PluginInfo> loaded_plugins();

/// The path (as given to load_plugin) of the loaded plugin that registered the kernel named `kernel`, or ""
/// for a kernel no plugin registered: what a printed command needs to load it again (`--plugin PATH`).
std::string plugin_path_of(const std::string& kernel);

}  // namespace pacheck
