// Fresh processes: runs of a kernel that are its first call in a process of their own, the evidence that
// tells a kernel whose output changes from call to call, or with earlier calls, from one that leaks poison
// (judge/cause.hpp, docs/CAUSES.md). A fork of the caller would not do: a process that has run the kernel
// carries the kernel's state into its children, and a fork after CUDA initialisation is broken (issue 17).
// So a server process is forked when the run starts, before any kernel call and before this process opens a
// GPU context, and it forks one child per request; the child prepares the cell's inputs itself, opens its
// own backend, calls the kernel once and sends the output bits back.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cell.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {

/// The fresh-process server of one run. Requests may come from any thread of this process and from any
/// child forked from it later (the isolated lanes' children: they inherit the server's socket), several at
/// once. Not copyable; the destructor ends the server and its children.
class FreshProcesses {
 public:
  /// Forks the server now, for `kernels` (the only kernels requests may name; they must outlive it). Each
  /// fresh run is killed after `timeout_s` wall seconds. Never throws for a failed fork: unavailable() then
  /// says why and every run() fails with that reason.
  FreshProcesses(const std::vector<const Kernel*>& kernels, double timeout_s);
  ~FreshProcesses();
  FreshProcesses(const FreshProcesses&) = delete;
  FreshProcesses& operator=(const FreshProcesses&) = delete;

  /// Empty while the server runs; else why there is none.
  const std::string& unavailable() const { return unavailable_; }

  /// `count` runs, each `k`'s first call in a new child of the server (the children run side by side) on
  /// `cell`'s inputs (prepare_inputs(cell.c), the clean paged cache, with cell.fault injected when
  /// `faulted`), on a backend opened there from `device` ("cpu", "cuda:1": Backend::name()): each run's raw
  /// output bits ([num_seqs, num_heads, head_size], cell.c.out_dtype). Empty, with `*why` set, unless every
  /// run answered: when the kernel is not one of the server's, the server is gone, a child failed (kernel
  /// error, crash, timeout), or a GPU device was asked for and this process had opened a GPU context before
  /// the server was forked (its children could not use the device).
  std::vector<std::vector<std::uint32_t>> run(const Kernel& k, const Cell& cell, bool faulted,
                                              const std::string& device, int count, std::string* why) const;

 private:
  std::vector<const Kernel*> kernels_;
  double timeout_s_;
  pid_t pid_ = -1;
  pid_t owner_ = -1;          ///< the process that forked the server (and ends it)
  int fd_ = -1;               ///< this side of the server's request socket (SOCK_SEQPACKET)
  bool gpu_usable_ = true;    ///< no GPU context was open in this process when the server was forked
  std::string unavailable_;
};

/// Records that this process opened a GPU context (exec/devices.cpp does, for the in-process GPU lane): a
/// FreshProcesses forked afterwards refuses GPU runs instead of forking children that cannot use the device.
void note_gpu_context_opened();

/// Whether note_gpu_context_opened() was called in this process (or in the process it was forked from):
/// a child forked now could not use the GPU.
bool gpu_context_opened();

}  // namespace pacheck
