#include "kernels/plugin.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/digest.hpp"

namespace pacheck {

PluginError::PluginError(std::string lib, std::string prob)
    : std::runtime_error(fmt::format("plugin '{}': {}", lib, prob)), library(std::move(lib)), problem(std::move(prob)) {}

namespace {

// The ABI v1 descriptor ends with user_data: a plugin that says its struct is smaller was built against
// something else, and reading past its end would read the plugin's stack.
constexpr std::size_t kDescV1Size = offsetof(pacheck_kernel_desc, user_data) + sizeof(void*);
// Version 2 appended `variants` and `scale_forms`.
constexpr std::size_t kDescV2Size = offsetof(pacheck_kernel_desc, scale_forms) + sizeof(std::uint32_t);
static_assert(kDescV2Size == sizeof(pacheck_kernel_desc), "a descriptor field was added: give it a version");

// Versions 3 and 4 added values only (PACHECK_LAYOUT_AITER; PACHECK_KERNEL_MLA); the descriptor kept its size.
/// The smallest descriptor a plugin of ABI `version` may pass (its version's full struct).
std::size_t desc_size_of_version(std::uint32_t version) { return version >= 2 ? kDescV2Size : kDescV1Size; }
constexpr std::size_t kMaxNameLength = kMaxKernelNameLength;

/// A descriptor as pacheck keeps it: copied, validated, owning its strings and arrays.
struct Desc {
  std::string name, description;
  pacheck_device device{};
  std::uint32_t flags = 0;
  std::vector<Layout> layouts;
  std::vector<pacheck_dtype> q_dtypes, kv_dtypes, out_dtypes;
  std::vector<int> head_sizes, block_sizes, gqa_ratios;
  pacheck_supports_fn supports = nullptr;
  pacheck_run_fn run = nullptr;
  void* user_data = nullptr;
  std::uint32_t variants = 0;     ///< PACHECK_VARIANT_* bits (0 for version-1 plugins)
  std::uint32_t scale_forms = 0;  ///< PACHECK_SCALE_FORM_BIT bits; 0 = every form
};

/// The plugin writes C enums; an out-of-range value must be caught as a number, never loaded as an enum
/// (that is undefined behaviour in C++), so every enum field is read as its int32 representation.
template <typename E>
std::int32_t enum_bits(const E& e) {
  static_assert(sizeof(E) == sizeof(std::int32_t));
  std::int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

std::string abi_dtype_name(std::int32_t v) {
  switch (v) {
    case PACHECK_DTYPE_F32: return "f32";
    case PACHECK_DTYPE_F16: return "f16";
    case PACHECK_DTYPE_BF16: return "bf16";
    case PACHECK_DTYPE_FP8_E4M3FN: return "fp8_e4m3fn";
    case PACHECK_DTYPE_FP8_E4M3FNUZ: return "fp8_e4m3fnuz";
    case PACHECK_DTYPE_FP8_E5M2: return "fp8_e5m2";
  }
  return fmt::format("<{}>", v);
}

/// Thrown while validating one descriptor; caught in add_kernel and recorded (it must not cross into C).
struct InvalidField : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Copies a (pointer, count) array after checking the pointer is there when the count says so.
template <typename T>
std::vector<T> copy_array(const T* p, std::uint32_t n, const char* field, bool required) {
  if (n == 0) {
    if (required) throw InvalidField(fmt::format("{}: empty (num_{} is 0; list at least one)", field, field));
    return {};
  }
  if (!p) throw InvalidField(fmt::format("{}: NULL with num_{} = {}", field, field, n));
  // A count this large is a garbage value, not a support list; refuse it before copying gigabytes.
  if (n > 4096) throw InvalidField(fmt::format("num_{} = {} is not a plausible list length", field, n));
  return std::vector<T>(p, p + n);
}

template <typename T>
void check_unique(const std::vector<T>& v, const char* field) {
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (enum_bits(v[i]) == enum_bits(v[j])) throw InvalidField(fmt::format("{}: value {} listed twice", field, enum_bits(v[i])));
}

std::vector<pacheck_dtype> copy_dtypes(const pacheck_dtype* p, std::uint32_t n, const char* field) {
  auto v = copy_array(p, n, field, true);
  for (const auto& d : v) {
    const std::int32_t b = enum_bits(d);
    if (b < PACHECK_DTYPE_F32 || b > PACHECK_DTYPE_FP8_E5M2)
      throw InvalidField(fmt::format("{}: {} is not a pacheck_dtype value", field, b));
  }
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (v[i] == v[j])
        throw InvalidField(fmt::format("{}: {} listed twice", field, abi_dtype_name(enum_bits(v[i]))));
  return v;
}

std::vector<int> copy_positive(const std::int32_t* p, std::uint32_t n, const char* field) {
  auto v = copy_array(p, n, field, false);
  for (std::int32_t x : v)
    if (x <= 0) throw InvalidField(fmt::format("{}: {} is not > 0", field, x));
  check_unique(v, field);
  return {v.begin(), v.end()};
}

/// Validates and copies one descriptor of a plugin that declared ABI `abi_version`: fields of later
/// versions are not read (they lie past the end of that version's struct). Throws InvalidField naming
/// the field.
Desc copy_desc(const pacheck_kernel_desc* d, std::uint32_t abi_version) {
  if (!d) throw InvalidField("descriptor pointer is NULL");
  const std::size_t need = desc_size_of_version(abi_version);
  if (d->struct_size < need)
    throw InvalidField(fmt::format("struct_size {} is smaller than the ABI v{} pacheck_kernel_desc ({} bytes)",
                                   d->struct_size, abi_version, need));
  // Larger than any descriptor this pacheck knows: not a descriptor of the declared version (a garbage
  // size, or a later header's struct under an older version number).
  if (d->struct_size > kDescV2Size)
    throw InvalidField(fmt::format("struct_size {} is larger than any pacheck_kernel_desc this pacheck knows (ABI v{}: "
                                   "{} bytes): set it to sizeof(pacheck_kernel_desc) of the header the plugin declares",
                                   d->struct_size, PACHECK_ABI_VERSION, kDescV2Size));
  // Built against the version-2 header but declaring version 1: the v2 fields are there, and a plugin that
  // sets them means them; ignoring them silently would e.g. turn declined per-head fp8 cells into errors.
  if (abi_version < 2 && d->struct_size >= kDescV2Size && (d->variants != 0 || d->scale_forms != 0))
    throw InvalidField(fmt::format("the library declares ABI version 1 but sets {} = 0x{:x}, a version-2 field that "
                                   "version 1 ignores: declare version 2 (PACHECK_PLUGIN_DEFINE_ABI_VERSION) or leave "
                                   "it 0",
                                   d->scale_forms != 0 ? "scale_forms" : "variants",
                                   d->scale_forms != 0 ? d->scale_forms : d->variants));
  Desc out;
  if (!d->name) throw InvalidField("name is NULL");
  out.name.assign(d->name, strnlen(d->name, kMaxNameLength + 1));
  if (const std::string why = kernel_name_problem(out.name); !why.empty()) throw InvalidField(why);
  // From here on the name is known: errors carry it (the caller adds it).
  if (d->description) out.description.assign(d->description, strnlen(d->description, 4096));
  const std::int32_t dev = enum_bits(d->device);
  if (dev < PACHECK_DEVICE_CPU || dev > PACHECK_DEVICE_HIP)
    throw InvalidField(fmt::format("device: {} is not a pacheck_device value", dev));
  out.device = static_cast<pacheck_device>(dev);
  if (d->flags & ~PACHECK_KERNEL_KNOWN_FLAGS)
    throw InvalidField(fmt::format("flags: unknown bits 0x{:x} (known: 0x{:x})", d->flags & ~PACHECK_KERNEL_KNOWN_FLAGS,
                                   PACHECK_KERNEL_KNOWN_FLAGS));
  // MLA is a version-4 value: a plugin declaring an older version lays out no MLA fields and cannot mean it.
  if ((d->flags & PACHECK_KERNEL_MLA) && abi_version < 4)
    throw InvalidField(fmt::format("flags: 0x{:x} (PACHECK_KERNEL_MLA) is a version-4 value and the library declares "
                                   "ABI version {}: declare version 4 (PACHECK_PLUGIN_DEFINE_ABI_VERSION)",
                                   PACHECK_KERNEL_MLA, abi_version));
  out.flags = d->flags;
  const auto layouts = copy_array(d->layouts, d->num_layouts, "layouts", true);
  for (const auto& l : layouts) {
    const std::int32_t b = enum_bits(l);
    if (b < PACHECK_LAYOUT_VLLM || b > PACHECK_LAYOUT_AITER)
      throw InvalidField(fmt::format("layouts: {} is not a pacheck_layout value", b));
    // AITER is a version-3 value: a plugin declaring an older version cannot mean it.
    if (b == PACHECK_LAYOUT_AITER && abi_version < 3)
      throw InvalidField(fmt::format("layouts: {} (PACHECK_LAYOUT_AITER) is a version-3 value and the library declares "
                                     "ABI version {}: declare version 3 (PACHECK_PLUGIN_DEFINE_ABI_VERSION)",
                                     b, abi_version));
    out.layouts.push_back(static_cast<Layout>(b));
  }
  check_unique(layouts, "layouts");
  out.q_dtypes = copy_dtypes(d->q_dtypes, d->num_q_dtypes, "q_dtypes");
  out.kv_dtypes = copy_dtypes(d->kv_dtypes, d->num_kv_dtypes, "kv_dtypes");
  out.out_dtypes = copy_dtypes(d->out_dtypes, d->num_out_dtypes, "out_dtypes");
  out.head_sizes = copy_positive(d->head_sizes, d->num_head_sizes, "head_sizes");
  out.block_sizes = copy_positive(d->block_sizes, d->num_block_sizes, "block_sizes");
  out.gqa_ratios = copy_positive(d->gqa_ratios, d->num_gqa_ratios, "gqa_ratios");
  if (!d->run) throw InvalidField("run is NULL");
  out.supports = d->supports;
  out.run = d->run;
  out.user_data = d->user_data;
  if (abi_version >= 2) {
    if (d->variants & ~PACHECK_VARIANT_KNOWN)
      throw InvalidField(fmt::format("variants: unknown bits 0x{:x} (known: 0x{:x})", d->variants & ~PACHECK_VARIANT_KNOWN,
                                     PACHECK_VARIANT_KNOWN));
    // PER_SLOT is a version-3 form: a version-2 plugin cannot name it, and its 0 ("every form") means the
    // forms version 2 knew, so it is never handed per-slot tables it has no fields for.
    const std::uint32_t known = abi_version >= 3 ? PACHECK_SCALE_FORMS_KNOWN : PACHECK_SCALE_FORMS_V2;
    if (d->scale_forms & ~known)
      throw InvalidField(fmt::format("scale_forms: unknown bits 0x{:x} (known to ABI v{}: 0x{:x}, PACHECK_SCALE_FORM_BIT of "
                                     "PER_TENSOR and PER_KV_HEAD{})",
                                     d->scale_forms & ~known, abi_version, known, abi_version >= 3 ? " and PER_SLOT" : ""));
    out.variants = d->variants;
    out.scale_forms = d->scale_forms != 0 || abi_version >= 3 ? d->scale_forms : PACHECK_SCALE_FORMS_V2;
  }
  return out;
}

const char* scale_form_words(pacheck_scale_form f) {
  switch (f) {
    case PACHECK_SCALE_FORM_NONE: return "none";
    case PACHECK_SCALE_FORM_PER_TENSOR: return "per-tensor";
    case PACHECK_SCALE_FORM_PER_KV_HEAD: return "per-KV-head";
    case PACHECK_SCALE_FORM_PER_SLOT: return "per-slot";
  }
  return "?";
}

/// Registration state behind pacheck_registrar::host.
struct Host {
  std::uint32_t abi_version = PACHECK_ABI_VERSION;  ///< the plugin's declared version
  std::vector<Desc> descs;
  std::vector<std::string> errors;
  int calls = 0;
};

pacheck_status add_kernel_cb(pacheck_registrar* self, const pacheck_kernel_desc* desc) noexcept {
  if (!self || !self->host) return PACHECK_ERROR;
  auto* host = static_cast<Host*>(self->host);
  const int index = host->calls++;
  try {
    host->descs.push_back(copy_desc(desc, host->abi_version));
    return PACHECK_OK;
  } catch (const std::exception& e) {
    // Name the kernel when its name was readable, so the user can find the descriptor in their source.
    std::string who = fmt::format("kernel #{}", index);
    if (desc && desc->struct_size >= kDescV1Size && desc->name) {  // name is a v1 field
      const std::size_t len = strnlen(desc->name, kMaxNameLength + 1);
      if (len > 0 && len <= kMaxNameLength) who += fmt::format(" ('{}')", std::string(desc->name, len));
    }
    try {
      host->errors.push_back(fmt::format("{}: {}", who, e.what()));
    } catch (...) {
    }
    return PACHECK_ERROR;
  }
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

/// A plugin kernel behind the Kernel interface.
class PluginKernel final : public Kernel {
 public:
  PluginKernel(Desc d, std::string library) : d_(std::move(d)), library_(std::move(library)) {}

  std::string name() const override { return d_.name; }
  std::string description() const override {
    return d_.description.empty() ? fmt::format("plugin kernel from {}", library_) : d_.description;
  }
  pacheck_device device() const override { return d_.device; }
  std::vector<Layout> layouts() const override { return d_.layouts; }
  bool batch_invariant() const override { return !(d_.flags & PACHECK_KERNEL_BATCH_VARIANT); }
  bool tf32_products() const override { return (d_.flags & PACHECK_KERNEL_TF32) != 0; }
  bool takes_mla() const override { return (d_.flags & PACHECK_KERNEL_MLA) != 0; }
  unsigned variants() const override { return d_.variants; }

  Support supports(const Case& c) const override {
    auto listed = [](const auto& v, auto x) { return v.empty() || std::find(v.begin(), v.end(), x) != v.end(); };
    auto dtypes = [](const std::vector<pacheck_dtype>& v) {
      std::vector<std::string> n;
      for (auto d : v) n.push_back(abi_dtype_name(d));
      return join_names(n);
    };
    auto ints = [](const std::vector<int>& v) { return fmt::format("{}", fmt::join(v, ", ")); };
    if (!listed(d_.layouts, c.layout)) {
      std::vector<std::string> n;
      for (Layout l : d_.layouts) n.emplace_back(layout_name(l));
      return Support::no(fmt::format("layout {}: the plugin lists {}", layout_name(c.layout), join_names(n)));
    }
    if (!listed(d_.q_dtypes, static_cast<pacheck_dtype>(c.q_dtype)))
      return Support::no(fmt::format("q_dtype {}: the plugin lists {}", dtype_name(c.q_dtype), dtypes(d_.q_dtypes)));
    if (!listed(d_.kv_dtypes, static_cast<pacheck_dtype>(c.kv_dtype)))
      return Support::no(fmt::format("kv_dtype {}: the plugin lists {}", dtype_name(c.kv_dtype), dtypes(d_.kv_dtypes)));
    if (!listed(d_.out_dtypes, static_cast<pacheck_dtype>(c.out_dtype)))
      return Support::no(fmt::format("out_dtype {}: the plugin lists {}", dtype_name(c.out_dtype), dtypes(d_.out_dtypes)));
    if (!listed(d_.head_sizes, c.head_size))
      return Support::no(fmt::format("head_size {}: the plugin lists {}", c.head_size, ints(d_.head_sizes)));
    if (!listed(d_.block_sizes, c.block_size))
      return Support::no(fmt::format("block_size {}: the plugin lists {}", c.block_size, ints(d_.block_sizes)));
    if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
      return Support::no(fmt::format("num_heads {} is not a multiple of num_kv_heads {}", c.num_heads, c.num_kv_heads));
    if (!listed(d_.gqa_ratios, c.gqa_ratio()))
      return Support::no(fmt::format("gqa ratio {}: the plugin lists {}", c.gqa_ratio(), ints(d_.gqa_ratios)));
    // The case as supports() sees it: its fields from the case field table (core/case_fields.cpp), the host
    // arrays below.
    pacheck_case_info info{};
    info.struct_size = sizeof info;
    set_case_fields(info, c);
    const pacheck_scale_form kf = info.k_scale_form, vf = info.v_scale_form;
    if (d_.scale_forms != 0) {
      std::vector<std::string> forms;
      for (auto f : {PACHECK_SCALE_FORM_PER_TENSOR, PACHECK_SCALE_FORM_PER_KV_HEAD, PACHECK_SCALE_FORM_PER_SLOT})
        if (d_.scale_forms & PACHECK_SCALE_FORM_BIT(f)) forms.emplace_back(scale_form_words(f));
      for (auto [field, form] : {std::pair{"k_scale", kf}, std::pair{"v_scale", vf}})
        if (form != PACHECK_SCALE_FORM_NONE && !(d_.scale_forms & PACHECK_SCALE_FORM_BIT(form)))
          return Support::no(fmt::format("{}: {} scales; the plugin's scale_forms list {}", field,
                                         scale_form_words(form), join_names(forms)));
    }
    // Attention variants (issue 19): a cell needing one the descriptor does not list is declined, naming the field.
    if (auto no = variant_decline(c, d_.variants, fmt::format("{} (not in its descriptor's variants)", d_.name))) return *no;
    if (!d_.supports) return Support::yes();

    const std::vector<std::int32_t> lens(c.seq_lens.begin(), c.seq_lens.end());
    std::vector<std::int32_t> query_lens(lens.size());
    for (int s = 0; s < c.num_seqs(); ++s) query_lens[static_cast<std::size_t>(s)] = c.query_len(s);
    const std::vector<float> ks = c.k_scale.resolve(c.num_kv_heads), vs = c.v_scale.resolve(c.num_kv_heads);
    info.seq_lens = lens.data();
    info.k_scales_per_head = kf == PACHECK_SCALE_FORM_PER_KV_HEAD ? ks.data() : nullptr;
    info.v_scales_per_head = vf == PACHECK_SCALE_FORM_PER_KV_HEAD ? vs.data() : nullptr;
    info.query_lens = query_lens.data();  // all 1 for plain decode
    char reason[PACHECK_MESSAGE_SIZE] = {};
    const std::int32_t st = enum_bits(d_.supports(d_.user_data, &info, reason, sizeof reason));
    reason[sizeof reason - 1] = '\0';
    const std::string why = reason[0] ? reason : "(no reason given)";
    if (st == PACHECK_OK) return Support::yes();
    if (st == PACHECK_DECLINED) return Support::no(why);
    if (st == PACHECK_ERROR) return Support::error("supports() failed: " + why);
    return Support::error(fmt::format("supports() failed: returned unknown status {} (expected PACHECK_OK, "
                                      "PACHECK_DECLINED or PACHECK_ERROR)",
                                      st));
  }

  void run(const pacheck_kernel_args& args) const override {
    char error[PACHECK_MESSAGE_SIZE] = {};
    std::int32_t st;
    {
      std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
      if (d_.flags & PACHECK_KERNEL_NOT_THREAD_SAFE) lock.lock();
      st = enum_bits(d_.run(d_.user_data, &args, error, sizeof error));
    }
    error[sizeof error - 1] = '\0';
    if (st == PACHECK_OK) return;
    const std::string msg = error[0] ? error : "(no message)";
    if (st == PACHECK_ERROR) throw KernelError(fmt::format("{} returned PACHECK_ERROR: {}", d_.name, msg));
    if (st == PACHECK_DECLINED)
      throw KernelError(fmt::format("{} returned PACHECK_DECLINED from run (decline in supports instead): {}", d_.name, msg));
    throw KernelError(fmt::format("{} returned unknown status {}", d_.name, st));
  }

 private:
  Desc d_;
  std::string library_;
  mutable std::mutex mu_;
};

/// Process-wide record of loaded plugins and which library registered each plugin kernel name.
struct Loaded {
  std::mutex mu;
  std::vector<PluginInfo> infos;
  std::map<std::string, std::string> owner;  // kernel name -> library path as given
};
Loaded& loaded() {
  static Loaded* l = new Loaded;  // never destroyed: plugin kernels may outlive static destruction order
  return *l;
}

/// Closes a dlopen handle unless released (a registered plugin is never closed).
struct Handle {
  void* h = nullptr;
  ~Handle() {
    if (h) dlclose(h);
  }
};

/// Calls `reg_fn` with a registrar for a plugin of version info.abi_version, validates what it registered and
/// adds the kernels to `reg` (all or none), recording each kernel's owner as info.path; fills info.kernels.
/// Throws PluginError (library info.path) as load_plugin documents.
void add_registered_kernels(PluginInfo& info, pacheck_register_kernels_fn reg_fn, Registry& reg) {
  const std::string& path = info.path;
  Host host;
  host.abi_version = info.abi_version;
  char error[PACHECK_MESSAGE_SIZE] = {};
  pacheck_registrar r{};
  r.struct_size = sizeof r;
  r.abi_version = info.abi_version;
  r.add_kernel = add_kernel_cb;
  r.error = error;
  r.error_size = sizeof error;
  r.host = &host;
  std::int32_t st;
  try {
    st = enum_bits(reg_fn(&r));
  } catch (...) {
    throw PluginError(path, "pacheck_register_kernels threw a C++ exception (it must return a status)");
  }
  error[sizeof error - 1] = '\0';
  if (!host.errors.empty()) {
    std::string more = host.errors.size() > 1 ? fmt::format(" (and {} more invalid descriptors)", host.errors.size() - 1) : "";
    throw PluginError(path, "invalid descriptor: " + host.errors.front() + more);
  }
  if (st != PACHECK_OK) {
    if (st == PACHECK_ERROR || st == PACHECK_DECLINED)
      throw PluginError(path, fmt::format("pacheck_register_kernels failed: {}", error[0] ? error : "(no message)"));
    throw PluginError(path, fmt::format("pacheck_register_kernels returned unknown status {}", st));
  }
  if (host.descs.empty())
    throw PluginError(path, "registered no kernel (pacheck_register_kernels must call registrar->add_kernel)");

  Loaded& L = loaded();
  std::lock_guard<std::mutex> lock(L.mu);
  for (std::size_t i = 0; i < host.descs.size(); ++i) {
    const std::string& n = host.descs[i].name;
    for (std::size_t j = 0; j < i; ++j)
      if (host.descs[j].name == n) throw PluginError(path, fmt::format("duplicate kernel name '{}': registered twice by this library", n));
    if (reg.find(n)) {
      auto it = L.owner.find(n);
      const std::string by = it != L.owner.end() ? fmt::format("plugin '{}'", it->second) : "a built-in kernel";
      throw PluginError(path, fmt::format("duplicate kernel name '{}': already registered by {}", n, by));
    }
  }
  for (auto& d : host.descs) {
    info.kernels.push_back(d.name);
    L.owner[d.name] = path;
    reg.add(std::make_shared<PluginKernel>(std::move(d), path));
  }
}

/// Why the regular file `path` cannot be a plugin library before anything reads it whole: "" when it is at
/// most kMaxPluginBytes and starts with the ELF magic.
std::string library_file_problem(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::uintmax_t bytes = fs::file_size(path, ec);
  if (ec) return fmt::format("cannot load: {}", ec.message());
  if (bytes > kMaxPluginBytes)
    return fmt::format("cannot load: the file is {} bytes, over the {} GiB a plugin library may have (not a kernel "
                       "library?)",
                       bytes, kMaxPluginBytes >> 30);
  char magic[4] = {};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  const std::size_t got = f ? std::fread(magic, 1, sizeof magic, f) : 0;
  if (f) std::fclose(f);
  if (!f) return fmt::format("cannot load: cannot open: {}", std::strerror(errno));
  if (got != sizeof magic || std::memcmp(magic, "\x7f" "ELF", sizeof magic) != 0)
    return "cannot load: not an ELF shared library (the file does not start with the ELF magic; a plugin is built "
           "with -shared, see examples/plugin/)";
  return {};
}

/// Records a registered library in loaded_plugins().
void record_loaded(const PluginInfo& info) {
  Loaded& L = loaded();
  std::lock_guard<std::mutex> lock(L.mu);
  L.infos.push_back(info);
}

}  // namespace

PluginInfo load_plugin(const std::string& path, Registry& reg) {
  namespace fs = std::filesystem;
  // dlopen searches LD_LIBRARY_PATH and the system for a bare file name; a test tool should load exactly
  // the file the user named.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  std::error_code ec;
  if (!fs::exists(open_path, ec)) throw PluginError(path, "no such file");
  if (!fs::is_regular_file(open_path, ec)) throw PluginError(path, "not a regular file");
  if (const std::string why = library_file_problem(open_path); !why.empty()) throw PluginError(path, why);

  PluginInfo info;
  info.path = path;
  info.resolved_path = fs::canonical(open_path, ec).string();
  if (ec) info.resolved_path = fs::absolute(open_path).string();
  try {
    info.sha256 = sha256_file(open_path);
  } catch (const std::exception& e) {
    throw PluginError(path, e.what());
  }

  dlerror();
  Handle lib{dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL)};
  if (!lib.h) {
    const char* why = dlerror();
    throw PluginError(path, fmt::format("cannot load: {}", why ? why : "dlopen failed"));
  }
  const auto* version = static_cast<const std::uint32_t*>(dlsym(lib.h, "pacheck_plugin_abi_version"));
  if (!version)
    throw PluginError(path, "missing symbol 'pacheck_plugin_abi_version' (write PACHECK_PLUGIN_DEFINE_ABI_VERSION; "
                            "once in the plugin, see include/pacheck/kernel_abi.h)");
  info.abi_version = *version;
  if (info.abi_version < PACHECK_ABI_MIN_VERSION || info.abi_version > PACHECK_ABI_VERSION)
    throw PluginError(path, fmt::format("wrong ABI version: the library was built for pacheck kernel ABI {}, this "
                                        "pacheck loads ABI {} to {}; rebuild it against this pacheck's kernel_abi.h",
                                        info.abi_version, PACHECK_ABI_MIN_VERSION, PACHECK_ABI_VERSION));
  auto reg_fn = reinterpret_cast<pacheck_register_kernels_fn>(dlsym(lib.h, "pacheck_register_kernels"));
  if (!reg_fn)
    throw PluginError(path, "missing symbol 'pacheck_register_kernels' (export it with C linkage: "
                            "extern \"C\" in C++)");

  add_registered_kernels(info, reg_fn, reg);
  lib.h = nullptr;  // registered: keep the code loaded for the life of the process
  record_loaded(info);
  return info;
}

PluginInfo add_linked_kernels(const std::string& label, pacheck_register_kernels_fn reg_fn, std::uint32_t abi_version,
                              Registry& reg) {
  if (!reg_fn) throw PluginError(label, "the registration function is NULL");
  if (abi_version < PACHECK_ABI_MIN_VERSION || abi_version > PACHECK_ABI_VERSION)
    throw PluginError(label, fmt::format("wrong ABI version {}: this pacheck takes ABI {} to {}", abi_version,
                                         PACHECK_ABI_MIN_VERSION, PACHECK_ABI_VERSION));
  PluginInfo info;
  info.path = label;
  info.abi_version = abi_version;
  add_registered_kernels(info, reg_fn, reg);
  return info;
}

std::vector<PluginInfo> load_plugins(const std::vector<std::string>& paths, Registry& reg) {
  std::vector<PluginInfo> out;
  for (const auto& p : paths) out.push_back(load_plugin(p, reg));
  return out;
}

std::vector<PluginInfo> loaded_plugins() {
  Loaded& L = loaded();
  std::lock_guard<std::mutex> lock(L.mu);
  return L.infos;
}

std::string plugin_path_of(const std::string& kernel) {
  // The owner map covers linked kernels (add_linked_kernels) as well as loaded libraries.
  Loaded& L = loaded();
  std::lock_guard<std::mutex> lock(L.mu);
  auto it = L.owner.find(kernel);
  return it == L.owner.end() ? std::string() : it->second;
}

}  // namespace pacheck
