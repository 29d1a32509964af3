// What every fuzz target shares: input as a string, and a check that stops
// the run (libFuzzer records the input) when a property fails.
#ifndef CIUIC_TESTS_FUZZ_FUZZ_CHECK_H_
#define CIUIC_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

// With CIUIC_FUZZ_WRITE_SEEDS=<dir>, a target's LLVMFuzzerInitialize writes
// valid examples made by the encoders there (seed corpus), then exits.
inline const char* SeedDir() { return std::getenv("CIUIC_FUZZ_WRITE_SEEDS"); }
inline void WriteSeed(const char* dir, const std::string& name, const std::string& bytes) {
  const std::string path = std::string(dir) + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

inline std::string FuzzText(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

#endif  // CIUIC_TESTS_FUZZ_FUZZ_CHECK_H_
