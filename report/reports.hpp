// The reports CI reads, in one include: the environment fingerprint, run identity, results.jsonl, report
// directories (--report-dir, --resume) and merge. Each lives in its own header, named below; include the
// one you need in new code.
#pragma once

#include "report/environment.hpp"
#include "report/json.hpp"
#include "report/merge.hpp"
#include "report/report.hpp"
#include "report/report_dir.hpp"
#include "report/results_log.hpp"
#include "report/run_identity.hpp"
