// A small declarative flag parser: every flag is declared with its help text, so `--help` documents
// all of them and unknown or malformed flags are rejected with a clear message.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsinfer::cli {

class Args {
 public:
  Args(std::string command, std::string summary);

  // Declare flags before parse(). `value_name` empty means a boolean switch.
  void flag(const std::string& name, const std::string& help);
  void option(const std::string& name, const std::string& value_name, const std::string& help,
              std::optional<std::string> default_value = std::nullopt);

  // An old spelling of a declared flag: accepted as `canonical` and listed in that flag's help line.
  void alias(const std::string& old_name, const std::string& canonical);

  // Returns false when the command should exit now (after --help, or after printing an error);
  // exit_code() then tells with which status.
  bool parse(int argc, char** argv);
  int exit_code() const { return exit_code_; }

  bool has(const std::string& name) const;
  std::string get(const std::string& name) const;  // value or default; fails if neither
  std::optional<std::string> get_optional(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  // An integer in [min, max]; fails naming the flag and the range (sizes that later feed a shift, a
  // product or a narrower type are bounded here, so they cannot overflow there).
  int64_t get_int(const std::string& name, int64_t min, int64_t max) const;
  // A size given in MiB, in [min_mib, max_mib], as bytes.
  int64_t get_mib_as_bytes(const std::string& name, int64_t min_mib, int64_t max_mib) const;
  double get_double(const std::string& name) const;
  std::string usage() const;

 private:
  struct Spec {
    std::string value_name;
    std::string help;
    std::optional<std::string> default_value;
    bool is_switch = false;
  };
  std::string command_;
  std::string summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> aliases_;  // old spelling -> canonical
  std::map<std::string, std::string> values_;
  int exit_code_ = 0;
};

// Parses "1,2,3" into integers; fails with a message naming the bad element.
std::vector<int32_t> parse_id_list(const std::string& text);

}  // namespace dsinfer::cli
