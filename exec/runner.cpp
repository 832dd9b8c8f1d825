#include "exec/runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "faults/inject.hpp"
#include "exec/isolate.hpp"

namespace pacheck {




namespace {

/// Output fill pattern: a signalling NaN with an unusual payload, which arithmetic never produces (it
/// yields quiet NaNs), so an element still holding it was never written.
std::uint32_t fill_bits(DType t) {
  switch (t) {
    case DType::f32: return 0x7FA5A5A5u;
    case DType::f16: return 0x7DA5u;
    case DType::bf16: return 0x7FA5u;
  }
  return 0;
}

constexpr std::size_t kGuardBytes = 4096;
std::uint8_t guard_byte(std::size_t i) { return static_cast<std::uint8_t>((i * 131u + 7u) & 0xFFu); }

/// A device buffer freed on scope exit.
struct DeviceBuffer {
  Backend& b;
  void* p = nullptr;
  DeviceBuffer(Backend& backend, std::size_t bytes) : b(backend), p(backend.alloc(std::max<std::size_t>(bytes, 1))) {}
  ~DeviceBuffer() { b.release(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::vector<std::uint8_t> query_bytes(const Case& c, const PrePaging& pre) {
  std::vector<std::uint8_t> q(pre.q.size() * dtype_size(c.q_dtype));
  for (std::size_t i = 0; i < pre.q.size(); ++i) store(q.data(), i, c.q_dtype, pre.q[i]);
  return q;
}

/// Uploads `host`, and after the run checks the device copy is unchanged.
struct CheckedInput {
  const char* name;
  const void* host;
  std::size_t bytes;
  DeviceBuffer buf;
  CheckedInput(Backend& b, const char* n, const void* h, std::size_t sz) : name(n), host(h), bytes(sz), buf(b, sz) {
    b.upload(buf.p, host, bytes);
  }
  /// Empty when unchanged, else a description of the first changed byte.
  std::string check(Backend& b) const {
    std::vector<std::uint8_t> back(bytes);
    b.download(back.data(), buf.p, bytes);
    if (std::memcmp(back.data(), host, bytes) == 0) return {};
    std::size_t i = 0;
    while (i < bytes && back[i] == static_cast<const std::uint8_t*>(host)[i]) ++i;
    return fmt::format("{} changed at byte {} of {}", name, i, bytes);
  }
};

}  // namespace

CaseData prepare_case(const Case& c, const RunOptions& opt) {
  CaseData d;
  d.c = c;
  d.pre = generate(c);
  d.ref = oracle(c, d.pre, opt.oracle_precision);
  if (opt.tolerance.policy == TolerancePolicy::calibrated) {
    const auto emu = emulate_low_precision(c, d.pre);
    d.emulation_rel_linf = compare(emu, d.ref.out, c, c.out_dtype).rel_linf;
  }
  d.cache = page(c, d.pre);
  return d;
}

RawRun run_kernel_once(const Kernel& k, Backend& b, const CaseData& data, const PagedCache& cache) {
  const Case& c = data.c;
  RawRun r;
  const auto qbytes = query_bytes(c, data.pre);
  CheckedInput q(b, "query", qbytes.data(), qbytes.size());
  CheckedInput kc(b, "key_cache", cache.key_cache.data(), cache.key_cache.size());
  CheckedInput vc(b, "value_cache", cache.value_cache.data(), cache.value_cache.size());
  CheckedInput bt(b, "block_tables", cache.block_tables.data(), cache.block_tables.size() * 4);
  CheckedInput sl(b, "seq_lens", cache.seq_lens.data(), cache.seq_lens.size() * 4);
  // fp8 per-KV-head scales are inputs like any other: on the device, and checked for writes.
  std::optional<CheckedInput> ks, vs;
  if (cache.k_per_head) ks.emplace(b, "k_scales_per_head", cache.k_scales.data(), cache.k_scales.size() * 4);
  if (cache.v_per_head) vs.emplace(b, "v_scales_per_head", cache.v_scales.data(), cache.v_scales.size() * 4);

  const std::size_t n = static_cast<std::size_t>(c.num_seqs()) * c.num_heads * c.head_size;
  const std::size_t esz = dtype_size(c.out_dtype), out_bytes = n * esz;
  std::vector<std::uint8_t> host_out(out_bytes + 2 * kGuardBytes);
  for (std::size_t i = 0; i < kGuardBytes; ++i) {
    host_out[i] = guard_byte(i);
    host_out[kGuardBytes + out_bytes + i] = guard_byte(i + kGuardBytes);
  }
  const std::uint32_t fill = fill_bits(c.out_dtype);
  for (std::size_t i = 0; i < n; ++i) store_bits(host_out.data() + kGuardBytes, i, c.out_dtype, fill);
  DeviceBuffer out(b, host_out.size());
  b.upload(out.p, host_out.data(), host_out.size());
  b.sync();

  pacheck_kernel_args args = make_args(c, cache, q.buf.p, kc.buf.p, vc.buf.p, static_cast<const std::int32_t*>(bt.buf.p),
                                       static_cast<const std::int32_t*>(sl.buf.p),
                                       static_cast<std::uint8_t*>(out.p) + kGuardBytes,
                                       ks ? static_cast<const float*>(ks->buf.p) : nullptr,
                                       vs ? static_cast<const float*>(vs->buf.p) : nullptr);
  args.stream = b.stream();
  r.ms = b.time_ms([&] { k.run(args); });
  b.sync();

  b.download(host_out.data(), out.p, host_out.size());
  for (std::size_t i = 0; i < kGuardBytes && r.guard_ok; ++i) {
    if (host_out[i] != guard_byte(i)) {
      r.guard_ok = false;
      r.guard_detail = fmt::format("guard before the output changed at byte -{}", kGuardBytes - i);
    }
  }
  for (std::size_t i = 0; i < kGuardBytes && r.guard_ok; ++i) {
    if (host_out[kGuardBytes + out_bytes + i] != guard_byte(i + kGuardBytes)) {
      r.guard_ok = false;
      r.guard_detail = fmt::format("guard after the output changed at byte +{}", i);
    }
  }
  for (const CheckedInput* in : {&q, &kc, &vc, &bt, &sl, ks ? &*ks : nullptr, vs ? &*vs : nullptr}) {
    if (!in) continue;
    std::string why = in->check(b);
    if (!why.empty() && r.inputs_ok) {
      r.inputs_ok = false;
      r.inputs_detail = why;
    }
  }
  r.bits.resize(n);
  r.out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    r.bits[i] = load_bits(host_out.data() + kGuardBytes, i, c.out_dtype);
    r.out[i] = from_bits(r.bits[i], c.out_dtype);
    if (r.bits[i] == fill) {
      if (r.first_unwritten < 0) r.first_unwritten = static_cast<std::int64_t>(i);
      ++r.unwritten;
    }
  }
  return r;
}



CellResult judge(const Cell& cell, const Kernel& k, const CaseData& data, const RawRun& run,
                 const std::vector<std::uint32_t>* clean_bits, const RunOptions& opt) {
  return judge(cell, k, data.ref, data.emulation_rel_linf, run, clean_bits, opt.tolerance);
}

std::size_t gpu_device_for(std::size_t position, std::size_t devices) {
  if (devices == 0) throw std::invalid_argument("gpu_device_for: no device to assign GPU work to");
  return position % devices;
}

std::pair<CellResult, RawRun> run_cell(const Cell& cell, const Kernel& k, Backend& backend, const RunOptions& opt,
                                       CaseData* data_out) {
  CaseData data = prepare_case(cell.c, opt);
  std::vector<std::uint32_t> clean;
  if (!cell.fault.clean()) clean = run_kernel_once(k, backend, data, data.cache).bits;
  PagedCache cache = data.cache;
  inject(cache, cell.fault);
  RawRun raw = run_kernel_once(k, backend, data, cache);
  CellResult r = judge(cell, k, data, raw, cell.fault.clean() ? nullptr : &clean, opt);
  if (data_out) *data_out = std::move(data);
  return {std::move(r), std::move(raw)};
}

namespace {

/// One case and every (kernel, cell) that uses it.
struct WorkItem {
  Case c;
  struct Job {
    std::size_t result_index;
    const Kernel* kernel;
    Cell cell;
    int index;  ///< position of the cell in Suite::cells
  };
  std::vector<Job> jobs;
};

CellResult declined_result(const Cell& cell, const Kernel& k, std::string why) {
  CellResult r;
  r.kernel = k.name();
  r.cell_id = cell.id();
  r.case_id = cell.c.id();
  r.fault = cell.fault.id();
  r.straddle = cell.c.straddles();
  r.verdict = Verdict::declined;
  r.detail = std::move(why);
  if (auto pred = k.expected_failures()) r.expected_fail = (*pred)(cell);
  return r;
}

CellResult error_result(const Cell& cell, const Kernel& k, std::string why) {
  CellResult r = declined_result(cell, k, std::move(why));
  r.verdict = Verdict::error;
  return r;
}

/// Runs one job on a prepared case. `clean` is the kernel's clean-cache output for this case (the
/// invariance baseline), computed on first need. Sets `fatal` when the device context was lost.
CellResult run_job(const WorkItem::Job& j, Backend& backend, const CaseData& data,
                   std::optional<std::vector<std::uint32_t>>& clean, const RunOptions& opt, bool& fatal,
                   std::mutex* device_mu = nullptr) {
  CellResult r;
  // A shared GPU backend runs one kernel call at a time; case preparation and judging stay parallel.
  auto once = [&](const PagedCache& pc) {
    std::unique_lock<std::mutex> lock;
    if (device_mu) lock = std::unique_lock<std::mutex>(*device_mu);
    return run_kernel_once(*j.kernel, backend, data, pc);
  };
  try {
    if (!clean && !j.cell.fault.clean()) clean = once(data.cache).bits;
    PagedCache cache = data.cache;
    inject(cache, j.cell.fault);
    const auto t0 = std::chrono::steady_clock::now();
    RawRun raw = once(j.cell.fault.clean() ? data.cache : cache);
    if (j.cell.fault.clean() && !clean) clean = raw.bits;
    r = judge(j.cell, *j.kernel, data, raw, j.cell.fault.clean() ? nullptr : &*clean, opt);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const KernelError& e) {
    r = error_result(j.cell, *j.kernel, e.what());
    if (e.fatal) fatal = true;
  } catch (const std::exception& e) {
    r = error_result(j.cell, *j.kernel, e.what());
  }
  r.index = j.index;
  r.device = backend.name();
  return r;
}

/// Runs all jobs of one case on `backend`; a clean run per kernel serves as the invariance baseline.
void run_item(const WorkItem& item, Backend& backend, const RunOptions& opt, std::vector<CellResult>& results,
              const std::function<void(CellResult&)>& emit, std::atomic<bool>& device_lost,
              std::mutex* device_mu = nullptr) {
  std::optional<CaseData> data;
  try {
    data = prepare_case(item.c, opt);
  } catch (const std::exception& e) {
    for (const auto& j : item.jobs) {
      results[j.result_index] = error_result(j.cell, *j.kernel, fmt::format("case preparation failed: {}", e.what()));
      results[j.result_index].index = j.index;
      emit(results[j.result_index]);
    }
    return;
  }
  std::unordered_map<const Kernel*, std::optional<std::vector<std::uint32_t>>> clean_bits;
  for (const auto& j : item.jobs) {
    CellResult r;
    if (device_lost && j.kernel->device() != PACHECK_DEVICE_CPU) {
      r = error_result(j.cell, *j.kernel, "not run: the device context was lost by an earlier fatal error");
      r.index = j.index;
    } else {
      bool fatal = false;
      r = run_job(j, backend, *data, clean_bits[j.kernel], opt, fatal, device_mu);
      if (fatal) device_lost = true;
    }
    results[j.result_index] = r;
    emit(results[j.result_index]);
  }
}

/// A case prepared in the parent for the isolated children of one lane (or why it could not be).
struct PreparedCase {
  std::optional<CaseData> data;
  std::string error;
};

PreparedCase prepare_for_children(const Case& c, const RunOptions& opt) {
  PreparedCase p;
  try {
    p.data = prepare_case(c, opt);
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  return p;
}

/// State of one isolated child process. run_suite's instances are only ever used inside children: each
/// child starts from the parent's copy, which the parent never touches, so every child starts empty.
struct ChildState {
  std::size_t item = SIZE_MAX;  ///< the case `own` / `clean` belong to
  PreparedCase own;             ///< the case, when the child prepares it itself
  std::optional<std::vector<std::uint32_t>> clean;  ///< baseline of the child's kernel on `item`
  std::unique_ptr<Backend> cpu, gpu;
};

/// Runs job `jj` of `item` inside an isolated child (see run_isolated), on `prepared` (the parent's
/// preparation, inherited through fork) or, when it is null, on a case the child prepares itself.
ChildOutcome run_in_child(ChildState& st, std::size_t item_index, const WorkItem& item, std::size_t jj,
                          const std::string& device_spec, const RunOptions& opt, const PreparedCase* prepared) {
  const WorkItem::Job& j = item.jobs[jj];
  ChildOutcome out;
  if (st.item != item_index) {
    st.item = item_index;
    st.clean.reset();
    st.own = prepared ? PreparedCase{} : prepare_for_children(item.c, opt);
  }
  const PreparedCase& pc = prepared ? *prepared : st.own;
  if (!pc.data) {
    out.result = error_result(j.cell, *j.kernel, fmt::format("case preparation failed: {}", pc.error));
    out.result.index = j.index;
    return out;
  }
  const bool cpu = j.kernel->device() == PACHECK_DEVICE_CPU;
  std::unique_ptr<Backend>& backend = cpu ? st.cpu : st.gpu;
  if (!backend) {
    try {
      // Opened here, not inherited: a GPU context does not survive fork().
      backend = cpu ? make_cpu_backend()
                    : open_backend(device_spec == "cpu" ? device_kind_spec(j.kernel->device()) : device_spec);
    } catch (const std::exception& e) {
      out.result = error_result(j.cell, *j.kernel, fmt::format("cannot open the device: {}", e.what()));
      out.result.index = j.index;
      out.restart = true;
      return out;
    }
  }
  bool fatal = false;
  out.result = run_job(j, *backend, *pc.data, st.clean, opt, fatal);
  out.restart = fatal;
  return out;
}

/// Asks isolated kernel `k` whether it runs each of `cells`, in a child process: supports() is kernel code
/// too (a plugin's callback may crash), and a GPU kernel's supports() may query its device, which would
/// create a GPU context in the parent that no child forked afterwards could use. A supports() that throws
/// declines the cell ("supports() failed: ...", as the plugin ABI reports PACHECK_ERROR). Returns one
/// answer per cell; when the child dies or hangs, sets `failure` (the cells' error) and returns nothing.
std::vector<Support> supports_in_child(const Kernel& k, const std::vector<const Cell*>& cells, double timeout_s,
                                       std::string* failure) {
  const auto answer = run_in_child_process(
      [&] {
        nlohmann::json out = nlohmann::json::array();
        for (const Cell* cell : cells) {
          Support s;
          try {
            s = k.supports(cell->c);
          } catch (const std::exception& e) {
            s = Support::no(std::string("supports() failed: ") + e.what());
          }
          out.push_back({s.ok, s.reason});
        }
        return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      },
      timeout_s);
  std::vector<Support> supports;
  try {
    if (answer)
      for (const auto& a : nlohmann::json::parse(*answer)) supports.push_back({a.at(0).get<bool>(), a.at(1).get<std::string>()});
  } catch (const std::exception&) {
    supports.clear();
  }
  if (supports.size() != cells.size()) {
    *failure = fmt::format("not run: asking {} which cells it supports failed (its supports() died, hung past {:g} s or "
                           "answered garbage in the child process that asks it)",
                           k.name(), timeout_s);
    supports.clear();
  }
  return supports;
}

/// The GPU backend specs a run spreads GPU work over, for GPU kernels of kind `kind`: one per device for
/// "cuda:all" / "hip:all" (counted in a child process, which leaves this process without a GPU context
/// for the isolated children forked later), else the one spec ("cpu" = the kernel's kind, as "cuda").
/// With no device present "<kind>:all" falls back to "<kind>", so it fails exactly as a plain "cuda"
/// does (open_backend's "no CUDA device: ..." in the parent, or each isolated cell's error).
std::vector<std::string> gpu_device_specs(const std::string& device_spec, pacheck_device kind) {
  if (device_spec == "cpu") return {device_kind_spec(kind)};
  if (!is_all_devices_spec(device_spec)) return {device_spec};
  const std::string plain = device_spec.substr(0, device_spec.find(':'));
  auto count = [&]() -> std::string {
    try {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& s : resolve_device_specs(device_spec)) out.push_back(s);
      return out.dump();
    } catch (const std::runtime_error&) {
      return "[]";  // no device, or the kind is not built in
    }
  };
  std::optional<std::string> answer = run_in_child_process(count, 120);
  if (!answer) answer = count();  // no child could be forked: ask here
  std::vector<std::string> specs;
  try {
    for (const auto& s : nlohmann::json::parse(*answer)) specs.push_back(s.get<std::string>());
  } catch (const std::exception&) {
    specs.clear();
  }
  if (specs.empty()) specs.push_back(plain);
  return specs;
}

}  // namespace


RunSummary run_suite(const Suite& suite, const std::vector<KernelPtr>& kernels, const std::string& device_spec,
                     const RunOptions& opt) {
  if (opt.shard_count < 1 || opt.shard_index < 0 || opt.shard_index >= opt.shard_count)
    throw std::invalid_argument(fmt::format("--shard: index {} of {} is out of range", opt.shard_index, opt.shard_count));
  if (opt.isolate && !(opt.cell_timeout_s > 0))
    throw std::invalid_argument(fmt::format("--cell-timeout: {} s (must be > 0)", opt.cell_timeout_s));
  RunSummary sum;
  sum.selftest = comparator_selftest();

  auto isolated = [&](const Kernel& k) { return opt.isolate && opt.isolate(k); };
  // The parent opens the GPU only for kernels it runs itself: isolated GPU kernels open their own context
  // in each child, and a CUDA context created before fork() is unusable in the child.
  const auto first_gpu = std::find_if(kernels.begin(), kernels.end(), [&](const KernelPtr& k) {
    return k->device() != PACHECK_DEVICE_CPU && !isolated(*k);
  });
  const bool parent_gpu = first_gpu != kernels.end();
  // The GPU devices: one for "cuda" / "cuda:N" (with no GPU named, device "cpu", the kernel's own kind:
  // cuda, or hip in a HIP build), every local one for "cuda:all", each with its own backend and stream.
  const auto any_gpu = std::find_if(kernels.begin(), kernels.end(),
                                    [](const KernelPtr& k) { return k->device() != PACHECK_DEVICE_CPU; });
  const std::vector<std::string> gpu_specs =
      any_gpu == kernels.end() ? std::vector<std::string>{} : gpu_device_specs(device_spec, (*any_gpu)->device());
  std::vector<std::unique_ptr<Backend>> gpus;
  if (parent_gpu)
    for (const auto& spec : gpu_specs) gpus.push_back(open_backend(spec));

  // Expand cells per kernel (resolving native layouts), apply shard, seed and filter.
  std::vector<WorkItem> items;
  // [0] CPU, [1] GPU, by case id; [2] CPU, [3] GPU isolated, by kernel and case id (one kernel per child).
  std::unordered_map<std::string, std::size_t> item_of_case[4];
  std::vector<std::size_t> gpu_items, cpu_items, iso_cpu_items, iso_gpu_items;
  std::vector<std::size_t> resumed;  // result indices taken from opt.previous
  struct Selected {
    const Kernel* k;
    Cell cell;
    std::size_t index;
    int ci;
    bool iso;
  };
  std::vector<Selected> selected;
  for (const auto& k : kernels) {
    const bool iso = isolated(*k);
    for (std::size_t ci = 0; ci < suite.cells.size(); ++ci) {
      if (static_cast<int>(ci % static_cast<std::size_t>(opt.shard_count)) != opt.shard_index) continue;
      Cell cell = suite.cells[ci].for_layouts(k->layouts());
      if (opt.seed) cell.c.seed = *opt.seed;
      const std::string id = cell.id();
      if (opt.filter && !std::regex_search(id, *opt.filter)) continue;
      const std::size_t index = sum.results.size();
      sum.results.emplace_back();
      if (auto prev = opt.previous.find(result_key(k->name(), id)); prev != opt.previous.end()) {
        sum.results[index] = prev->second;
        sum.results[index].suite = suite.name;
        sum.results[index].index = static_cast<int>(ci);
        resumed.push_back(index);
        continue;
      }
      selected.push_back({k.get(), std::move(cell), index, static_cast<int>(ci), iso});
    }
  }
  // Isolated kernels are asked in a child process too, one per kernel (see supports_in_child).
  struct Asked {
    std::vector<const Cell*> cells;
    std::vector<Support> answers;
    std::string failure;
    std::size_t next = 0;
  };
  std::unordered_map<const Kernel*, Asked> asked;
  for (const auto& sel : selected)
    if (sel.iso) asked[sel.k].cells.push_back(&sel.cell);
  for (const auto& k : kernels)
    if (auto it = asked.find(k.get()); it != asked.end())
      it->second.answers = supports_in_child(*k, it->second.cells, opt.cell_timeout_s, &it->second.failure);
  for (auto& sel : selected) {
    const Kernel& k = *sel.k;
    Support s;
    if (!sel.iso) {
      s = k.supports(sel.cell.c);
    } else if (Asked& a = asked.at(&k); !a.failure.empty()) {
      sum.results[sel.index] = error_result(sel.cell, k, a.failure);
      sum.results[sel.index].suite = suite.name;
      sum.results[sel.index].index = sel.ci;
      continue;
    } else {
      s = a.answers[a.next++];
    }
    if (!s.ok) {
      sum.results[sel.index] = declined_result(sel.cell, k, s.reason);
      sum.results[sel.index].suite = suite.name;
      sum.results[sel.index].index = sel.ci;
      continue;
    }
    const int dev = (k.device() == PACHECK_DEVICE_CPU ? 0 : 1) + (sel.iso ? 2 : 0);
    // Isolated GPU work is grouped per kernel (its child keeps one context across cases); everything
    // else per case, shared by the kernels that run it.
    const std::string key = dev == 3 ? result_key(k.name(), sel.cell.c.id()) : sel.cell.c.id();
    auto it = item_of_case[dev].find(key);
    if (it == item_of_case[dev].end()) {
      it = item_of_case[dev].emplace(key, items.size()).first;
      std::vector<std::size_t>* lists[4] = {&cpu_items, &gpu_items, &iso_cpu_items, &iso_gpu_items};
      lists[dev]->push_back(items.size());
      items.push_back(WorkItem{sel.cell.c, {}});
    }
    items[it->second].jobs.push_back({sel.index, &k, std::move(sel.cell), sel.ci});
  }

  std::mutex mu;
  int done = static_cast<int>(resumed.size());
  const int total = static_cast<int>(sum.results.size());
  std::function<void(CellResult&)> emit = [&](CellResult& r) {
    std::lock_guard<std::mutex> lock(mu);
    r.suite = suite.name;
    ++done;
    if (opt.on_result) opt.on_result(r);
    if (opt.on_progress) opt.on_progress(done, total);
  };
  // Cells settled while planning (declined, or the `error` of an isolated kernel whose supports() could not
  // be asked) are reported now, like any finished cell (live table, results.jsonl).
  for (std::size_t i = 0; i < sum.results.size(); ++i)
    if ((sum.results[i].verdict == Verdict::declined || sum.results[i].verdict == Verdict::error) &&
        !std::binary_search(resumed.begin(), resumed.end(), i))
      emit(sum.results[i]);

  // Workers take cases from one queue, GPU cases first. Case generation, the oracle and judging run in
  // parallel; GPU kernel calls go one at a time per device through that device's mutex, on its own
  // stream: GPU case k runs on device k % devices (gpu_device_for), whichever thread prepares it. Results
  // land at fixed indices, so the report does not depend on the thread or device count. A fatal error
  // (lost context) ends the cells of its own device only.
  std::vector<std::size_t> queue = gpu_items;
  queue.insert(queue.end(), cpu_items.begin(), cpu_items.end());
  const std::size_t ndev = std::max<std::size_t>(1, gpus.size());
  std::vector<std::mutex> gpu_mu(ndev);
  std::vector<std::atomic<bool>> device_lost(ndev + 1);  // [ndev]: the CPU items'
  const int threads = std::max(1, opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency()));
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < std::min<int>(threads, static_cast<int>(queue.size())); ++t)
    workers.emplace_back([&] {
      auto cpu = make_cpu_backend();
      for (std::size_t i; (i = next++) < queue.size();) {
        if (i < gpu_items.size()) {
          const std::size_t d = gpu_device_for(i, ndev);
          run_item(items[queue[i]], *gpus[d], opt, sum.results, emit, device_lost[d], &gpu_mu[d]);
        } else {
          run_item(items[queue[i]], *cpu, opt, sum.results, emit, device_lost[ndev], nullptr);
        }
      }
    });
  for (auto& w : workers) w.join();

  // Isolated kernels run after the in-process ones, so no thread is inside a kernel when a child is forked.
  // A job number is (item << 32 | job within the item).
  if (!iso_cpu_items.empty() || !iso_gpu_items.empty()) {
    std::unordered_map<const Kernel*, int> group_of;
    for (const auto& k : kernels) group_of.emplace(k.get(), static_cast<int>(group_of.size()));
    auto job_of = [&](std::size_t job) -> const WorkItem::Job& { return items[job >> 32].jobs[job & 0xFFFFFFFFu]; };
    auto batches = [&](const std::vector<std::size_t>& list) {
      std::vector<IsolatedBatch> out;
      for (std::size_t i : list) {
        IsolatedBatch b;
        for (std::size_t jj = 0; jj < items[i].jobs.size(); ++jj) {
          b.jobs.push_back(i << 32 | jj);
          b.groups.push_back(group_of.at(items[i].jobs[jj].kernel));
        }
        out.push_back(std::move(b));
      }
      return out;
    };
    IsolationHooks common;
    common.lost = [&](std::size_t job, Verdict v, const std::string& detail, double seconds) {
      const WorkItem::Job& j = job_of(job);
      CellResult r = error_result(j.cell, *j.kernel, detail);
      r.verdict = v;
      r.seconds = seconds;
      r.index = j.index;
      return r;
    };
    common.done = [&](std::size_t job, CellResult& r) {
      const WorkItem::Job& j = job_of(job);
      sum.results[j.result_index] = std::move(r);
      emit(sum.results[j.result_index]);
    };
    // CPU: each case is prepared once, in the parent, and inherited by a short-lived child per kernel
    // (forking is cheap on the CPU; preparing a case in every kernel's child would repeat the oracle).
    // A child's state only ever lives in that child: the parent never touches `cpu_child`.
    const std::vector<IsolatedBatch> cpu_batches = batches(iso_cpu_items);
    IsolationOptions cpu_opt;
    cpu_opt.lanes = opt.isolate_lanes > 0 ? opt.isolate_lanes : threads;
    cpu_opt.cell_timeout_s = opt.cell_timeout_s;
    cpu_opt.child_per_batch = true;
    std::vector<PreparedCase> lane_case(static_cast<std::size_t>(std::max(1, cpu_opt.lanes)));
    ChildState cpu_child;
    IsolationHooks cpu_hooks = common;
    cpu_hooks.prepare = [&](std::size_t b, int lane) {
      lane_case[lane] = prepare_for_children(items[iso_cpu_items[b]].c, opt);
    };
    cpu_hooks.release = [&](std::size_t, int lane) { lane_case[lane] = PreparedCase{}; };
    cpu_hooks.run = [&](std::size_t job, int lane) {
      return run_in_child(cpu_child, job >> 32, items[job >> 32], job & 0xFFFFFFFFu, device_spec, opt, &lane_case[lane]);
    };
    // GPU: one child per kernel kept across cases (a device context per child, not per case), which
    // prepares each case itself; one lane per device (lane L runs on gpu_specs[L]), since one device runs
    // GPU cells one at a time in-process too. Lanes take cases as they free up: which device runs a case
    // varies from run to run, the results (fixed indices) do not.
    ChildState gpu_child;
    IsolationHooks gpu_hooks = common;
    gpu_hooks.run = [&](std::size_t job, int lane) {
      return run_in_child(gpu_child, job >> 32, items[job >> 32], job & 0xFFFFFFFFu, gpu_specs.at(lane), opt, nullptr);
    };
    IsolationOptions gpu_opt;
    gpu_opt.lanes = static_cast<int>(std::max<std::size_t>(1, gpu_specs.size()));
    gpu_opt.cell_timeout_s = opt.cell_timeout_s;
    std::exception_ptr gpu_error;
    std::thread iso_gpu;
    if (!iso_gpu_items.empty())
      iso_gpu = std::thread([&] {
        try {
          run_isolated(batches(iso_gpu_items), gpu_opt, gpu_hooks);
        } catch (...) {
          gpu_error = std::current_exception();
        }
      });
    std::exception_ptr cpu_error;
    try {
      if (!cpu_batches.empty()) run_isolated(cpu_batches, cpu_opt, cpu_hooks);
    } catch (...) {
      cpu_error = std::current_exception();
    }
    if (iso_gpu.joinable()) iso_gpu.join();
    if (cpu_error) std::rethrow_exception(cpu_error);
    if (gpu_error) std::rethrow_exception(gpu_error);
  }

  std::vector<KernelRole> roles;
  for (const auto& k : kernels) roles.push_back({k->name(), k->is_negative_control()});
  sum.shard = opt.shard_count > 1;
  summarize(sum, roles);
  return sum;
}

}  // namespace pacheck
