// attention-gen: generates a kernel library for the caller's own targets and kernels, without CMake
// (docs/api.md "Kernel libraries"). It runs the installed generator executable
// once per kernel, exactly as attention_add_kernel_library() does (that function calls this tool),
// and writes into the output folder:
//   <name>_<role>.a/.h       each kernel, for every target (Halide's multi-target dispatch)
//   <name>_kernel_info.a/.h  the probe the runtime asks which target runs (kernel_library.h)
//   <name>_registration.cpp  registers the library with the runtime (compile it into the app)
//   <name>.h                 declares <name>::register_kernels()
//   manifest.json            what was generated, from what
// The libraries carry no Halide runtime: the attention library the app links has it.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

constexpr int kAbi = 1;  // attention/kernel_library.h's kKernelLibraryAbi

struct Role {
  const char* role;       // the built-in kernel it stands in for
  const char* generator;  // registered Halide generator
  const char* params;     // its fixed generator parameters
  bool tiled;             // takes the tiling parameters of --schedule
};

struct Kernel {
  const char* name;
  const char* what;
  std::vector<Role> roles;
};

const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel> list = {
      {"sdpa",
       "scaled_dot_product_attention without masks (prefill and decode tilings)",
       {{"sdpa_f32_prefill", "sdpa", "query_tiling=prefill", true},
        {"sdpa_f32_decode", "sdpa", "query_tiling=decode", true}}},
      {"masked_sdpa",
       "scaled_dot_product_attention with masks (causal, window, lengths, bool/additive, ALiBi, "
       "softcap)",
       {{"sdpa_f32_masked_prefill", "masked_sdpa", "query_tiling=prefill", true},
        {"sdpa_f32_masked_decode", "masked_sdpa", "query_tiling=decode", true}}},
      {"sdpa_f16kv",
       "decode over a Float16 KV cache, without and with masks (k and v read as stored)",
       {{"sdpa_f16kv_decode", "sdpa", "query_tiling=decode kv_type=float16", true},
        {"sdpa_f16kv_masked_decode", "masked_sdpa", "query_tiling=decode kv_type=float16", true}}},
      {"sdpa_bf16kv",
       "decode over a BFloat16 KV cache, without and with masks (k and v read as stored)",
       {{"sdpa_bf16kv_decode", "sdpa", "query_tiling=decode kv_type=bfloat16", true},
        {"sdpa_bf16kv_masked_decode", "masked_sdpa", "query_tiling=decode kv_type=bfloat16",
         true}}},
      {"mha",
       "multi_head_attention's whole block, without and with masks",
       {{"mha_f32", "mha", "masked=false", false},
        {"mha_f32_masked", "mha", "masked=true", false}}},
  };
  return list;
}

// The tiling parameters of --schedule (generators/contract/kernel_contract.h, kCpuTilingParams).
const char* const kTilingParams[] = {"score_queries", "score_keys", "dot_lanes", "pv_rows",
                                     "pv_cols",       "query_tile", "key_chunk", "split_keys"};
const char* const kAutoschedulers[] = {"Mullapudi2016", "Li2018", "Adams2019"};
const char* const kGpuFeatures[] = {"cuda",         "opencl", "metal",       "vulkan",
                                    "d3d12compute", "webgpu", "hexagon_dma", "hvx"};

void usage(std::ostream& os) {
  os << "usage: attention-gen --name NAME --kernels K1,K2,... --targets T1,T2,... --out DIR\n"
        "                     [--schedule key=value,...] [--generator PATH] [--jobs N] [--quiet]\n"
        "                     [--dry-run]\n"
        "       attention-gen --list\n"
        "       attention-gen --help\n"
        "\n"
        "Generates the attention kernels K for the Halide targets T (best first; each kernel\n"
        "dispatches to the first one the CPU runs) into DIR, as static libraries named\n"
        "NAME_<kernel>.a with their headers, NAME_registration.cpp, NAME.h and manifest.json.\n"
        "Link the libraries and compile NAME_registration.cpp into an application that links\n"
        "the attention library: its calls then run these kernels (docs/api.md, \"Kernel\n"
        "libraries\"). CMake projects use attention_add_kernel_library(), which runs this tool.\n"
        "\n"
        "  --name NAME        library name, a C++ identifier (also the kernels' namespace)\n"
        "  --kernels LIST     kernels to generate (--list)\n"
        "  --targets LIST     Halide targets of one architecture, e.g. x86-64-linux-avx2 or\n"
        "                     arm-64-linux; CPU targets only\n"
        "  --schedule LIST    tiling parameters of the sdpa and masked_sdpa kernels, and\n"
        "                     autoscheduler=NAME for the sdpa kernels (--list)\n"
        "  --out DIR          output folder (created)\n"
        "  --generator PATH   the generator executable (default: ../lib/attention/\n"
        "                     attention_generators beside this tool)\n"
        "  --jobs N           generator processes at once (default: the machine's hardware\n"
        "                     threads); each kernel is one process\n"
        "  --quiet            no progress lines\n"
        "  --dry-run          check every argument (targets with Halide) and print the files\n"
        "                     it would write, one per line, without generating them\n";
}

void list(std::ostream& os) {
  os << "kernels:\n";
  for (const Kernel& k : kernels()) {
    os << "  " << k.name << std::string(14 - std::strlen(k.name), ' ') << k.what << "\n";
    for (const Role& r : k.roles) os << "                  " << r.role << "\n";
  }
  os << "targets: any Halide CPU target, <arch>-<bits>-<os>[-<feature>...], one architecture per\n"
        "  library, e.g. x86-64-linux-avx512_skylake, x86-64-linux-avx2-fma-f16c, "
        "x86-64-linux-sse41,\n"
        "  arm-64-linux, arm-64-linux-arm_dot_prod-arm_fp16\n";
  os << "schedule parameters (--schedule / SCHEDULE):\n";
  for (const char* p : kTilingParams) os << "  " << p << "=<int>\n";
  os << "  autoscheduler=<";
  for (const char* a : kAutoschedulers) os << a << (a == kAutoschedulers[2] ? ">\n" : "|");
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string joined;
  for (const std::string& part : parts) joined += (joined.empty() ? "" : separator) + part;
  return joined;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

[[noreturn]] void fail(const std::string& message) {
  std::cerr << "attention-gen: " << message << "\n";
  std::exit(2);
}

std::string self_dir() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return ".";
  std::string exe(path.data(), n);
  return exe.substr(0, exe.rfind('/'));
}

// Halide's messages name a target with the features this tool adds (halide_targets): say it as
// given.
std::string without_added_features(std::string message) {
  for (const char* added : {"-user_context", "-no_runtime", "-c_plus_plus_name_mangling"}) {
    for (size_t at = message.find(added); at != std::string::npos; at = message.find(added)) {
      message.erase(at, std::strlen(added));
    }
  }
  return message;
}

// Starts argv in folder `dir` with its output into `log` (absolute). In the output folder, so that
// nothing the generator writes depends on where that folder is (Halide derives the headers'
// include guards from the path it is given).
pid_t spawn(const std::vector<std::string>& argv, const std::string& dir, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) fail("cannot run " + argv[0] + ": " + std::strerror(spawned));
  return pid;
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128; }

// spawn, then the exit status.
int run(const std::vector<std::string>& argv, const std::string& dir, const std::string& log) {
  int status = 0;
  waitpid(spawn(argv, dir, log), &status, 0);
  return exit_code(status);
}

std::string absolute(const std::string& path) {
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) fail("cannot resolve " + path);
  std::string result = resolved;
  std::free(resolved);
  return result;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Halide's own words for a failed run: its "Error:" line and the next, else the last line.
std::string halide_error(const std::string& log) {
  const std::vector<std::string> lines = split(log, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t at = lines[i].find("Error: ");
    if (at != std::string::npos) {
      return lines[i].substr(at + 7) + (i + 1 < lines.size() ? " " + lines[i + 1] : "");
    }
  }
  return lines.empty() ? "(no output)" : lines.back();
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct Options {
  std::string name, out, generator;
  std::vector<std::string> kernels, targets, schedule;
  bool quiet = false;
  bool dry_run = false;
  int jobs = 0;  // 0: the hardware threads
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      usage(std::cout);
      std::exit(0);
    }
    if (arg == "--list") {
      list(std::cout);
      std::exit(0);
    }
    if (arg == "--quiet" || arg == "--dry-run") {
      (arg == "--quiet" ? o.quiet : o.dry_run) = true;
      continue;
    }
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(arg + " needs a value (--help)");
      return argv[++i];
    };
    if (arg == "--name") {
      o.name = value();
    } else if (arg == "--out") {
      o.out = value();
    } else if (arg == "--generator") {
      o.generator = value();
    } else if (arg == "--kernels") {
      o.kernels = split(value(), ',');
    } else if (arg == "--targets") {
      o.targets = split(value(), ',');
    } else if (arg == "--schedule") {
      o.schedule = split(value(), ',');
    } else if (arg == "--jobs") {
      const std::string n = value();
      char* end = nullptr;
      const long jobs = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || jobs < 1 || jobs > 256) {
        fail("--jobs '" + n + "': expected a whole number from 1 to 256");
      }
      o.jobs = static_cast<int>(jobs);
    } else {
      fail("unknown option '" + arg + "' (--help)");
    }
  }
  if (o.name.empty() || o.out.empty() || o.kernels.empty() || o.targets.empty()) {
    fail("--name, --kernels, --targets and --out are required (--help)");
  }
  if (!is_identifier(o.name)) fail("--name '" + o.name + "' is not a C++ identifier");
  return o;
}

const Kernel& find_kernel(const std::string& name) {
  for (const Kernel& k : kernels()) {
    if (name == k.name) return k;
  }
  std::vector<std::string> known;
  for (const Kernel& k : kernels()) known.push_back(k.name);
  fail("unknown kernel '" + name + "' (kernels: " + join(known, ", ") + ")");
}

// <arch>-<bits>-<os> of a target.
std::string arch_bits_os(const std::string& target) {
  const std::vector<std::string> words = split(target, '-');
  if (words.size() < 3) fail("unknown target '" + target + "' (expected <arch>-<bits>-<os>[-...])");
  return words[0] + "-" + words[1] + "-" + words[2];
}

void check_schedule(const std::vector<std::string>& schedule) {
  for (const std::string& item : schedule) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq),
                      val = eq == std::string::npos ? "" : item.substr(eq + 1);
    bool known = false;
    for (const char* p : kTilingParams) {
      if (key == p) {
        known = true;
        if (val.empty() || val.find_first_not_of("0123456789") != std::string::npos ||
            std::atoi(val.c_str()) <= 0) {
          fail("schedule parameter '" + item + "': " + key + " takes a positive integer");
        }
      }
    }
    if (key == "autoscheduler") {
      known = true;
      bool found = false;
      for (const char* a : kAutoschedulers) found = found || val == a;
      if (!found) fail("schedule parameter '" + item + "': unknown autoscheduler (--list)");
    }
    if (!known) fail("unknown schedule parameter '" + key + "' (--list)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<const Kernel*> chosen;
  for (const std::string& k : o.kernels) chosen.push_back(&find_kernel(k));
  const std::string platform = arch_bits_os(o.targets.front());
  for (const std::string& t : o.targets) {
    if (arch_bits_os(t) != platform) {
      fail("targets '" + o.targets.front() + "' and '" + t +
           "' are of two architectures: generate one library per architecture");
    }
    for (const std::string& feature : split(t, '-')) {
      for (const char* gpu : kGpuFeatures) {
        if (feature == gpu)
          fail("target '" + t +
               "': GPU targets are not supported in kernel "
               "libraries yet (CPU targets only)");
      }
    }
  }
  check_schedule(o.schedule);
  const std::string generator_path =
      o.generator.empty() ? self_dir() + "/../lib/attention/attention_generators" : o.generator;
  if (access(generator_path.c_str(), X_OK) != 0) {
    fail("no generator executable at " + generator_path + " (--generator PATH)");
  }
  const std::string generator = absolute(generator_path);
  mkdir(o.out.c_str(), 0755);
  struct stat st {};
  if (stat(o.out.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("cannot create --out " + o.out);
  const std::string out = absolute(o.out);
  const std::string log = out + "/" + o.name + ".log";

  // Halide's target strings, as the runtime's kernels are built: per-call user_context, and the
  // Halide runtime of the attention library the app links; C++ names (<name>::<role>), so two
  // libraries, or an app's own functions of the same names, never clash.
  const auto halide_targets = [&](std::vector<std::string> targets) {
    for (std::string& t : targets) t += "-user_context-no_runtime-c_plus_plus_name_mangling";
    return join(targets, ",");
  };
  // Each target alone first, so a bad one is named (Halide's header-only output is quick).
  for (const std::string& t : o.targets) {
    if (run({generator, "-g", "kernel_info", "-f", "probe", "-e", "c_header", "-o", ".",
             "target=" + halide_targets({t})},
            out, log) != 0) {
      fail("unknown target '" + t + "': " + without_added_features(halide_error(read_file(log))));
    }
  }
  std::remove((out + "/probe.h").c_str());

  // The tiling values, for each target and each tiling the chosen kernels take (a second each:
  // the check makes no kernel), so a value the schedule cannot honour stops here, at configure
  // time, rather than part way through generating.
  std::vector<std::string> tiling_values, query_tilings;
  for (const std::string& item : o.schedule) {
    if (item.rfind("autoscheduler=", 0) != 0) tiling_values.push_back(item);
  }
  for (const Kernel* k : chosen) {
    for (const Role& r : k->roles) {
      if (!r.tiled) continue;
      const std::string q = std::string(r.params).find("query_tiling=decode") != std::string::npos
                                ? "decode"
                                : "prefill";
      if (std::find(query_tilings.begin(), query_tilings.end(), q) == query_tilings.end()) {
        query_tilings.push_back(q);
      }
    }
  }
  if (!tiling_values.empty()) {
    for (const std::string& t : o.targets) {
      for (const std::string& q : query_tilings) {
        std::vector<std::string> argv = {generator,
                                         "-g",
                                         "tiling_check",
                                         "-f",
                                         "tiling_check",
                                         "-e",
                                         "c_header",
                                         "-o",
                                         ".",
                                         "target=" + halide_targets({t}),
                                         "query_tiling=" + q};
        argv.insert(argv.end(), tiling_values.begin(), tiling_values.end());
        if (run(argv, out, log) != 0) {
          fail("--schedule " + join(tiling_values, ",") + " for target '" + t +
               "': " + without_added_features(halide_error(read_file(log))));
        }
      }
    }
    std::remove((out + "/tiling_check.h").c_str());
  }

  struct Job {
    std::string role, generator, file;
    std::vector<std::string> params;
    std::vector<std::string> plugins;
  };
  std::vector<Job> jobs;
  // The probe ends with the bare platform target: what it reports when the CPU runs none of ours.
  std::vector<std::string> probe_targets = o.targets;
  if (o.targets.back() != platform) probe_targets.push_back(platform);
  jobs.push_back({"kernel_info", "kernel_info", o.name + "_kernel_info", {}, {}});
  for (const Kernel* k : chosen) {
    for (const Role& r : k->roles) {
      Job job{r.role, r.generator, o.name + "_" + r.role, split(r.params, ' '), {}};
      for (const std::string& item : o.schedule) {
        const bool autoscheduler = item.rfind("autoscheduler=", 0) == 0;
        if (autoscheduler && std::string(r.generator) == "sdpa") {
          // Through GuardedTails (generators/guarded_tails_autoscheduler.cpp): tails safe for
          // every shape.
          std::string inner = item.substr(item.find('=') + 1), plugin = inner;
          for (char& c : plugin) c = static_cast<char>(std::tolower(c));
          job.plugins.push_back(generator.substr(0, generator.rfind('/')) + "/libautoschedule_" +
                                plugin + ".so");
          job.params.push_back("autoscheduler=GuardedTails");
          job.params.push_back("autoscheduler.inner=" + inner);
        } else if (!autoscheduler && r.tiled) {
          job.params.push_back(item);
        }
      }
      jobs.push_back(job);
    }
  }

  if (o.dry_run) {
    for (const Job& job : jobs) std::cout << job.file << ".a\n" << job.file << ".h\n";
    std::cout << o.name << "_registration.cpp\n" << o.name << ".h\nmanifest.json\n";
    std::remove(log.c_str());
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  // One generator process per kernel, up to --jobs at once, each with a log of its own.
  std::vector<std::vector<std::string>> commands;
  std::vector<const std::vector<std::string>*> job_targets;
  for (const Job& job : jobs) {
    const std::vector<std::string>& targets = job.role == "kernel_info" ? probe_targets : o.targets;
    job_targets.push_back(&targets);
    std::vector<std::string> argv = {generator,
                                     "-g",
                                     job.generator,
                                     "-f",
                                     o.name + "::" + job.role,
                                     "-n",
                                     job.file,
                                     "-e",
                                     "static_library,c_header",
                                     "-o",
                                     ".",
                                     "target=" + halide_targets(targets)};
    for (const std::string& p : job.plugins) {
      if (access(p.c_str(), R_OK) != 0) fail("autoscheduler plugin " + p + " not found");
      argv.insert(argv.begin() + 1, {"-p", p});
    }
    argv.insert(argv.end(), job.params.begin(), job.params.end());
    commands.push_back(argv);
  }
  const size_t parallel =
      o.jobs > 0 ? static_cast<size_t>(o.jobs) : std::max(1u, std::thread::hardware_concurrency());
  const auto job_log = [&](size_t i) { return out + "/" + jobs[i].file + ".log"; };
  std::map<pid_t, size_t> running;
  size_t next = 0, failed = jobs.size();  // failed: the first job (in order) that failed
  while (running.size() > 0 || (next < jobs.size() && failed == jobs.size())) {
    while (next < jobs.size() && failed == jobs.size() && running.size() < parallel) {
      if (!o.quiet) {
        std::cout << "[" << next + 1 << "/" << jobs.size() << "] " << jobs[next].file << " for "
                  << join(*job_targets[next], ", ") << std::endl;
      }
      running[spawn(commands[next], out, job_log(next))] = next;
      ++next;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    const auto done = running.find(pid);
    if (done == running.end()) continue;
    const size_t i = done->second;
    running.erase(done);
    if (exit_code(status) != 0) {
      failed = std::min(failed, i);
    } else {
      std::remove(job_log(i).c_str());
    }
  }
  if (failed < jobs.size()) {
    fail(jobs[failed].file + ": the generator failed: " + halide_error(read_file(job_log(failed))) +
         " (log: " + job_log(failed) + ")");
  }
  std::remove(log.c_str());

  // The registration source: the library's kernels under the roles they take.
  std::ofstream reg(o.out + "/" + o.name + "_registration.cpp");
  reg << "// Written by attention-gen: registers kernel library " << o.name
      << " with the attention runtime.\n#include <attention/kernel_library.h>\n\n#include \""
      << o.name << ".h\"\n#include \"" << o.name << "_kernel_info.h\"\n";
  for (size_t i = 1; i < jobs.size(); ++i) reg << "#include \"" << jobs[i].file << ".h\"\n";
  const std::string targets_spaced = join(o.targets, " ");
  reg << "\nnamespace " << o.name
      << " {\nnamespace {\n\nconst attention::GeneratedKernel kKernels[] = {\n";
  for (size_t i = 1; i < jobs.size(); ++i) {
    reg << "    {\"" << jobs[i].role << "\", \"" << o.name << "::" << jobs[i].role
        << "\", reinterpret_cast<void (*)()>(&" << jobs[i].role << "), &" << jobs[i].role
        << "_metadata,\n     \"" << join(jobs[i].params, " ") << "\"},\n";
  }
  reg << "};\n\nconst attention::GeneratedKernelLibrary kLibrary = {\n    " << kAbi << ", \""
      << o.name << "\", \"" << targets_spaced << "\", &kernel_info, kKernels,\n    "
      << jobs.size() - 1 << "};\n\n"
      << "// Registered at the first attention call of the process (kernel_library.h).\n"
      << "const bool kRegistered = "
         "attention::detail::register_kernel_library_at_first_use(&kLibrary);\n\n"
      << "}  // namespace\n\nattention::Status register_kernels() {\n  (void)kRegistered;\n"
      << "  return attention::register_kernel_library(kLibrary);\n}\n\n}  // namespace " << o.name
      << "\n";
  reg.close();

  std::ofstream header(o.out + "/" + o.name + ".h");
  header << "// Written by attention-gen: kernel library " << o.name << " (" << targets_spaced
         << ").\n#pragma once\n\n#include <attention/attention.h>\n\nnamespace " << o.name
         << " {\n\n// Registers the library with the attention runtime (also done before the first "
            "call\n// when "
         << o.name
         << "_registration.cpp is linked): ok, or why this CPU cannot use it.\n"
            "attention::Status register_kernels();\n\n}  // namespace "
         << o.name << "\n";
  header.close();

  std::ofstream manifest(o.out + "/manifest.json");
  manifest << "{\n  \"name\": " << json_string(o.name) << ",\n  \"abi\": " << kAbi
           << ",\n  \"targets\": [";
  for (size_t i = 0; i < o.targets.size(); ++i) {
    manifest << (i ? ", " : "") << json_string(o.targets[i]);
  }
  manifest << "],\n  \"schedule\": [";
  for (size_t i = 0; i < o.schedule.size(); ++i) {
    manifest << (i ? ", " : "") << json_string(o.schedule[i]);
  }
  manifest << "],\n  \"kernels\": [\n";
  for (size_t i = 0; i < jobs.size(); ++i) {
    manifest << "    {\"role\": " << json_string(jobs[i].role)
             << ", \"generator\": " << json_string(jobs[i].generator)
             << ", \"params\": " << json_string(join(jobs[i].params, " "))
             << ", \"library\": " << json_string(jobs[i].file + ".a")
             << ", \"header\": " << json_string(jobs[i].file + ".h") << "}"
             << (i + 1 < jobs.size() ? "," : "") << "\n";
  }
  manifest << "  ],\n  \"registration\": " << json_string(o.name + "_registration.cpp")
           << ",\n  \"header\": " << json_string(o.name + ".h") << "\n}\n";
  manifest.close();
  if (!o.quiet) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "wrote " << jobs.size() << " kernels of " << o.name << " into " << o.out << " in "
              << static_cast<int>(seconds + 0.5) << " s" << std::endl;
  }
  return 0;
}
