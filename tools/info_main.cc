// ciuic-info: version, build options, SIMD targets (compiled, runnable,
// chosen), the cache sizes the kernels tile with (discovered by topology/)
// and the parameters derived from them, and every CIUIC_* knob with its
// value and where it came from. `--format json` for scripts. In the shared
// library, so that the Python package prints the same (python -m ciuic.info).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "ciuic/topology.h"
#include "collectives/device.h"
#include "collectives/registry.h"
#include "collectives/selection.h"
#include "common/version.h"
#include "tools/info_main.h"

namespace {

std::string Json(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      o += b;
      continue;
    }
    o += c;
  }
  return o + "\"";
}

// The transports an entry runs on, as "shm,tcp,verbs".
std::string Transports(const ciuic::collectives::AlgorithmInfo& e) {
  std::string out;
  for (auto k : {ciuic::transport::BackendKind::kShm, ciuic::transport::BackendKind::kTcp,
                 ciuic::transport::BackendKind::kVerbs}) {
    if (e.RunsOn(k)) out += std::string(out.empty() ? "" : ",") + ciuic::transport::BackendName(k);
  }
  return out;
}

// The registry, one line per algorithm of each collective (what CIUIC_ALGO,
// tuning-file rules and the perf tools' -a accept), and what CIUIC_ALGO
// forces.
void PrintAlgorithms(const ciuic::collectives::AlgoKnob& algo) {
  using namespace ciuic::collectives;
  std::printf("algorithms (CIUIC_ALGO=auto | NAME | COLLECTIVE:NAME,...; now '%s'):\n", algo.text.c_str());
  for (Collective c : AllCollectives()) {
    for (const AlgorithmInfo* e : EntriesFor(c)) {
      std::printf("  %-14s %-13s %-10s %-13s %s%s\n", CollectiveName(c), e->name(), AlgorithmKindName(e->kind),
                  Transports(*e).c_str(), e->summary, algo.For(c) == e ? "  [forced]" : "");
    }
  }
}

}  // namespace

namespace ciuic::tools {

int InfoMain(int argc, char** argv) {
  bool json = false;
  bool algorithms_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--format" && i + 1 < argc && std::strcmp(argv[i + 1], "json") == 0) {
      json = true;
      ++i;
    } else if (a == "--format=json") {
      json = true;
    } else if (a == "--format" && i + 1 < argc && std::strcmp(argv[i + 1], "table") == 0) {
      ++i;
    } else if (a == "--algorithms") {
      algorithms_only = true;
    } else {
      std::fprintf(stderr, "usage: ciuic-info [--format table|json] [--algorithms]\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  ciuic::StatusOr<ciuic::Config> config = ciuic::Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "ciuic-info: %s\n", config.status().message().c_str());
    return 2;
  }
  ciuic::StatusOr<ciuic::collectives::AlgoKnob> algo = ciuic::collectives::AlgoKnob::Parse(config->algo);
  if (!algo.ok()) {
    std::fprintf(stderr, "ciuic-info: %s\n", algo.status().message().c_str());
    return 2;
  }
  if (algorithms_only && !json) {
    PrintAlgorithms(*algo);
    return 0;
  }
  // Cache sizes: from the topology (hwloc, CIUIC_TOPO_FILE or /sys); the
  // kernels' own sysconf fallback only when discovery fails.
  ciuic::kernels::CacheSizes kc = ciuic::kernels::CacheSizes::FromSystem();
  std::string cache_source = "sysconf (topology discovery failed)";
  ciuic::StatusOr<ciuic::topology::Topology> topo = ciuic::topology::Discover(*config);
  if (topo.ok()) {
    const ciuic::topology::CacheSizes c = ciuic::topology::KernelCacheSizes(*topo);
    kc.l1d = c.l1d;
    kc.l2 = c.l2;
    kc.llc = c.llc;
    cache_source = c.measured ? "topology" : "topology defaults (nothing discovered)";
  } else {
    cache_source += ": " + topo.status().message();
  }
  ciuic::StatusOr<ciuic::kernels::Reducer> r = ciuic::kernels::Reducer::Create(*config, kc);
  if (!r.ok()) {
    std::fprintf(stderr, "ciuic-info: %s\n", r.status().message().c_str());
    return 2;
  }
  const std::vector<ciuic::kernels::TargetInfo> targets = ciuic::kernels::CompiledTargets();
  const std::vector<ciuic::KnobDescription> knobs = ciuic::DescribeKnobs(*config);
  const std::vector<std::string> unknown = ciuic::UnknownEnvKnobs();
  const size_t nt = r->nt_threshold_bytes();
  // GPU buffers: what a collective on device memory would use.
  const ciuic::collectives::GpuSupport gpu = ciuic::collectives::DescribeGpuSupport(*config);
  std::string gpu_route = "not looked for (CIUIC_GPU=off): host buffers only";
  if (gpu.looked) {
    if (!gpu.driver) {
      gpu_route = "none (no CUDA driver)";
    } else if (config->gpu == "host" || !gpu.nccl) {
      gpu_route = "host copies";
    } else {
      gpu_route = "NCCL when every rank has a GPU of its own, else host copies";
    }
  }
  if (json) {
    std::printf("{\n  \"version\": %s,\n  \"git\": %s,\n  \"build\": %s,\n",
                Json(ciuic::Version()).c_str(), Json(ciuic::GitRevision()).c_str(),
                Json(ciuic::BuildOptions()).c_str());
    std::printf("  \"simd\": {\"chosen\": %s, \"compiled\": [", Json(r->target_name()).c_str());
    for (size_t i = 0; i < targets.size(); ++i) {
      std::printf("%s{\"name\": %s, \"supported\": %s}", i ? ", " : "",
                  Json(targets[i].name).c_str(), targets[i].supported ? "true" : "false");
    }
    std::printf("]},\n  \"caches\": {\"l1d\": %zu, \"l2\": %zu, \"llc\": %zu, \"source\": %s},\n",
                kc.l1d, kc.l2, kc.llc, Json(cache_source).c_str());
    std::printf("  \"kernels\": {\"tile_bytes\": %zu, \"tile_large_bytes\": %zu, "
                "\"nt_threshold_bytes\": %s, \"prefetch_bytes\": %zu, \"prefetch_from_bytes\": %zu, "
                "\"fp8_pairs\": %s},\n",
                r->tile_bytes(), r->tile_large_bytes(), nt == SIZE_MAX ? "null" : std::to_string(nt).c_str(),
                r->prefetch_bytes(), r->prefetch_min_bytes(),
                Json(ciuic::kernels::Reducer::Fp8PairKernelName(r->fp8_pair_kernel())).c_str());
    std::printf("  \"gpu\": {\"cuda_driver\": %s, \"cuda_driver_text\": %s, \"nccl\": %s, \"nccl_text\": %s, "
                "\"route\": %s},\n",
                gpu.driver ? "true" : "false", Json(gpu.driver_text).c_str(), gpu.nccl ? "true" : "false",
                Json(gpu.nccl_text).c_str(), Json(gpu_route).c_str());
    std::printf("  \"knobs\": [\n");
    for (size_t i = 0; i < knobs.size(); ++i) {
      std::printf("    {\"name\": %s, \"value\": %s, \"default\": %s, \"source\": %s, \"doc\": %s}%s\n",
                  Json(knobs[i].name).c_str(), Json(knobs[i].value).c_str(),
                  Json(knobs[i].default_value).c_str(), Json(knobs[i].source).c_str(),
                  Json(knobs[i].doc).c_str(), i + 1 < knobs.size() ? "," : "");
    }
    std::printf("  ],\n  \"algorithms\": [\n");
    const auto& reg = ciuic::collectives::Registry();
    for (size_t i = 0; i < reg.size(); ++i) {
      const auto& e = reg[i];
      std::printf("    {\"collective\": %s, \"name\": %s, \"kind\": %s, \"transports\": %s, \"summary\": %s, "
                  "\"forced\": %s}%s\n",
                  Json(ciuic::collectives::CollectiveName(e.collective)).c_str(), Json(e.name()).c_str(),
                  Json(ciuic::collectives::AlgorithmKindName(e.kind)).c_str(), Json(Transports(e)).c_str(),
                  Json(e.summary).c_str(), algo->For(e.collective) == &e ? "true" : "false",
                  i + 1 < reg.size() ? "," : "");
    }
    std::printf("  ],\n  \"unknown_env\": [");
    for (size_t i = 0; i < unknown.size(); ++i) {
      std::printf("%s%s", i ? ", " : "", Json(unknown[i]).c_str());
    }
    std::printf("]\n}\n");
    return 0;
  }
  std::printf("ciuic %s (git %s)\n", ciuic::Version(), ciuic::GitRevision());
  std::printf("build:   %s\n", ciuic::BuildOptions());
  std::printf("simd:    %s chosen; compiled:", r->target_name());
  for (const auto& t : targets) std::printf(" %s%s", t.name.c_str(), t.supported ? "" : "(not on this CPU)");
  std::printf("\ncaches:  l1d=%zu l2=%zu llc=%zu (from %s)\n", kc.l1d, kc.l2, kc.llc,
              cache_source.c_str());
  std::printf("kernels: tile=%zu B for >4 inputs (%zu B beyond L2); non-temporal stores from %s; "
              "prefetch %zu B ahead for working sets > %zu B; two-input fp8 sum/avg: %s\n",
              r->tile_bytes(), r->tile_large_bytes(), nt == SIZE_MAX ? "never" : (std::to_string(nt) + " B").c_str(),
              r->prefetch_bytes(), r->prefetch_min_bytes(),
              ciuic::kernels::Reducer::Fp8PairKernelName(r->fp8_pair_kernel()));
  if (gpu.looked) {
    std::printf("gpu:     CUDA driver: %s; NCCL: %s\n", gpu.driver_text.c_str(), gpu.nccl_text.c_str());
  }
  std::printf("gpu buffers: %s\n", gpu_route.c_str());
  std::printf("knobs:\n");
  for (const auto& k : knobs) {
    std::printf("  %-26s = %-10s [%s] %s\n", k.name.c_str(),
                k.value.empty() ? "''" : k.value.c_str(), k.source.c_str(), k.doc.c_str());
  }
  PrintAlgorithms(*algo);
  for (const std::string& u : unknown) {
    std::printf("warning: %s is set but is not a ciuic knob (typo?)\n", u.c_str());
  }
  return 0;
}

}  // namespace ciuic::tools
