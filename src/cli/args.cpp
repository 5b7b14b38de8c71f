#include "cli/args.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace dsinfer::cli {

Args::Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {
  flag("help", "show this help and exit");
}

void Args::flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  specs_[name] = Spec{"", help, std::nullopt, true};
}

void Args::option(const std::string& name, const std::string& value_name, const std::string& help,
                  std::optional<std::string> default_value) {
  order_.push_back(name);
  specs_[name] = Spec{value_name, help, std::move(default_value), false};
}

void Args::alias(const std::string& old_name, const std::string& canonical) {
  DSINFER_CHECK_INTERNAL(specs_.count(canonical) && !specs_.count(old_name), "dsinfer ", command_, ": bad alias --",
                         old_name, " of --", canonical);
  aliases_[old_name] = canonical;
}

std::string Args::usage() const {
  std::ostringstream out;
  out << "usage: dsinfer " << command_ << " [flags]\n\n" << summary_ << "\n\nflags:\n";
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::string left = "  --" + name + (s.is_switch ? "" : " " + s.value_name);
    out << left;
    if (left.size() < 28) out << std::string(28 - left.size(), ' ');
    else out << "\n" << std::string(28, ' ');
    out << s.help;
    if (s.default_value) out << " (default: " << *s.default_value << ")";
    for (const auto& [old_name, canonical] : aliases_) {
      if (canonical == name) out << " (old spelling: --" << old_name << ")";
    }
    out << "\n";
  }
  return out.str();
}

bool Args::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "dsinfer %s: unexpected argument '%s'\n%s", command_.c_str(), arg.c_str(), usage().c_str());
      exit_code_ = 2;
      return false;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (auto a = aliases_.find(name); a != aliases_.end()) name = a->second;
    auto it = specs_.find(name);
    if (it == specs_.end()) {
      std::fprintf(stderr, "dsinfer %s: unknown flag '--%s' (see --help)\n", command_.c_str(), name.c_str());
      exit_code_ = 2;
      return false;
    }
    if (it->second.is_switch) {
      if (inline_value) {
        std::fprintf(stderr, "dsinfer %s: flag '--%s' takes no value\n", command_.c_str(), name.c_str());
        exit_code_ = 2;
        return false;
      }
      values_[name] = "1";
    } else if (inline_value) {
      values_[name] = *inline_value;
    } else {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dsinfer %s: flag '--%s' needs a value (%s)\n", command_.c_str(), name.c_str(),
                     it->second.value_name.c_str());
        exit_code_ = 2;
        return false;
      }
      values_[name] = argv[++i];
    }
  }
  if (has("help")) {
    std::fputs(usage().c_str(), stdout);
    exit_code_ = 0;
    return false;
  }
  return true;
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

std::optional<std::string> Args::get_optional(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end() && it->second.default_value) return it->second.default_value;
  return std::nullopt;
}

std::string Args::get(const std::string& name) const {
  auto v = get_optional(name);
  DSINFER_CHECK(v.has_value(), "dsinfer ", command_, ": missing required flag --", name);
  return *v;
}

int64_t Args::get_int(const std::string& name) const {
  const std::string v = get(name);
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  DSINFER_CHECK(ec == std::errc() && ptr == v.data() + v.size(), "dsinfer ", command_, ": --", name,
                " expects an integer, got '", v, "'");
  return out;
}

int64_t Args::get_int(const std::string& name, int64_t min, int64_t max) const {
  const int64_t v = get_int(name);
  DSINFER_CHECK(v >= min && v <= max, "dsinfer ", command_, ": --", name, " must be in [", min, ", ", max, "], got ",
                v);
  return v;
}

int64_t Args::get_mib_as_bytes(const std::string& name, int64_t min_mib, int64_t max_mib) const {
  DSINFER_CHECK_INTERNAL(min_mib >= 0 && max_mib <= (INT64_MAX >> 20), "dsinfer ", command_, ": --", name,
                         ": MiB range beyond int64 bytes");
  return get_int(name, min_mib, max_mib) << 20;
}

double Args::get_double(const std::string& name) const {
  const std::string v = get(name);
  try {
    size_t used = 0;
    double out = std::stod(v, &used);
    if (used == v.size()) return out;
  } catch (const std::exception&) {
  }
  core::fail("dsinfer ", command_, ": --", name, " expects a number, got '", v, "'");
}

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    DSINFER_CHECK(!item.empty() && ec == std::errc() && ptr == item.data() + item.size(),
                  "bad token id '", item, "' in list '", text, "'");
    ids.push_back(id);
    start = end + 1;
  }
  return ids;
}

}  // namespace dsinfer::cli
