// weft's one CSV reader (RFC 4180 with the leniencies real traces need): a header row, quoted
// fields with doubled quotes and embedded separators or newlines, CRLF or LF line ends, an optional
// UTF-8 byte-order mark, blank lines skipped. Every trace, profile and workload reader goes through
// it, so every file error names the source, the line and the column, and every size is bounded
// before memory is spent: a hostile file cannot make it allocate more than max_record_bytes.
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace weft {

/// Bounds and dialect of a csv_reader. A record past a bound is a parse error, never a bigger
/// allocation.
struct csv_limits {
  std::size_t max_record_bytes = std::size_t{1} << 20;  ///< one record (line), quotes included
  std::size_t max_fields = 256;                         ///< fields of one record
  std::uint64_t max_records = std::uint64_t{1} << 32;   ///< data records of the whole file
  char separator = ',';
  char comment = '\0';           ///< records starting with this character are skipped; '\0' = none
  std::uint64_t first_line = 1;  ///< number of the stream's first line (the caller read some already)
};

/// Reads records from a stream. The first non-blank record is the header (names trimmed of
/// spaces). Not thread-safe (one reader per stream). next() is O(record bytes); field access O(1);
/// column() O(columns).
class csv_reader {
 public:
  /// `source` names the input in errors (a path, "<memory>"). Reads the header; throws
  /// weft::error(parse) for an empty input or a malformed header.
  csv_reader(std::istream& in, std::string source, csv_limits limits = {})
      : in_(in), source_(std::move(source)), limits_(limits), line_(limits.first_line), next_line_(limits.first_line) {
    expects(limits_.max_record_bytes > 0 && limits_.max_fields > 0, errc::invalid_argument, "weft::csv_reader",
            "limits must be positive");
    if (!read_record()) fail_at(line_, 0, "the input is empty: expected a header row");
    header_ = fields_;
    for (auto& h : header_) h = std::string(trim(h));
    header_line_ = line_;
    fields_.clear();
  }

  /// Column names of the header row, in order.
  const std::vector<std::string>& header() const noexcept { return header_; }
  /// Index of the header column named `name`; throws weft::error(parse) naming the file and the
  /// columns it has when there is none.
  std::size_t column(std::string_view name) const {
    for (std::size_t i = 0; i < header_.size(); ++i)
      if (header_[i] == name) return i;
    std::string have;
    for (const auto& h : header_) have += (have.empty() ? "" : ", ") + clip(h);
    fail_at(header_line_, 0, "missing column '", clip(name), "' (columns: ", have, ")");
  }
  /// Like column(), but -1 when absent (optional columns).
  std::ptrdiff_t find_column(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < header_.size(); ++i)
      if (header_[i] == name) return static_cast<std::ptrdiff_t>(i);
    return -1;
  }

  /// Moves to the next non-blank data record; false at the end of the input. Throws weft::error
  /// (parse) for a record longer than the limits, an unterminated quote, or more records than allowed.
  bool next() {
    if (!read_record()) return false;
    ++records_;
    if (records_ > limits_.max_records)
      fail_at(line_, 0, "more than ", limits_.max_records, " records (csv_limits::max_records)");
    return true;
  }

  /// 1-based line number where the current record starts.
  std::uint64_t line() const noexcept { return line_; }
  /// Data records read so far.
  std::uint64_t records() const noexcept { return records_; }
  /// Fields of the current record.
  std::size_t size() const noexcept { return fields_.size(); }
  const std::string& source() const noexcept { return source_; }

  /// Raw text of field i (unquoted), or a parse error naming the column when the record is short.
  std::string_view field(std::size_t i) const {
    if (i >= fields_.size())
      fail_at(line_, i + 1, "the record has ", fields_.size(), " fields, column '", column_name(i), "' is missing");
    return fields_[i];
  }
  /// field(i) with leading and trailing spaces and tabs removed.
  std::string_view trimmed(std::size_t i) const { return trim(field(i)); }

  /// Field i parsed as a number of type T (integers in base 10; floating point in the usual
  /// notations). Throws weft::error(parse) naming source, line, column and the text for anything
  /// else: empty, trailing characters, out of T's range, or (for floating T) NaN or infinity.
  template <class T>
  requires(std::integral<T> || std::floating_point<T>) && (!std::same_as<T, bool>)T number(std::size_t i) const {
    const std::string_view text = trimmed(i);
    T value{};
    const char* first = text.data();
    const char* last = text.data() + text.size();
    if (!text.empty() && *first == '+') ++first;  // from_chars rejects a leading '+'
    const auto [end, ec] = std::from_chars(first, last, value);
    if (text.empty() || ec == std::errc::invalid_argument || end != last)
      fail_at(line_, i + 1, "column '", column_name(i), "': '", clip(text), "' is not a ",
              std::is_floating_point_v<T> ? "number" : "whole number");
    if (ec == std::errc::result_out_of_range)
      fail_at(line_, i + 1, "column '", column_name(i), "': ", clip(text), " is out of range");
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(value)) fail_at(line_, i + 1, "column '", column_name(i), "': ", clip(text), " is not finite");
    }
    return value;
  }

  /// Throws weft::error(parse) "<source>:<line>: <parts>" about the current record. For the
  /// checks a reader adds on top (negative lengths, out-of-order timestamps).
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    fail_at(line_, 0, parts...);
  }
  /// As fail(), naming column i too.
  template <class... Parts>
  [[noreturn]] void fail_column(std::size_t i, const Parts&... parts) const {
    fail_at(line_, i + 1, "column '", column_name(i), "': ", parts...);
  }

  /// At most 60 characters of text, then "...(N bytes)": error messages stay short whatever the input.
  static std::string clip(std::string_view text) {
    constexpr std::size_t keep = 60;
    if (text.size() <= keep) return std::string(text);
    return detail::concat(text.substr(0, keep), "...(", text.size(), " bytes)");
  }

 private:
  static std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  }
  std::string column_name(std::size_t i) const { return i < header_.size() ? clip(header_[i]) : std::to_string(i + 1); }

  template <class... Parts>
  [[noreturn]] WEFT_COLD void fail_at(std::uint64_t line, std::size_t column, const Parts&... parts) const {
    if (column > 0)
      detail::raise(errc::parse, "weft::csv_reader", clip(source_), ":", line, ":", column, ": ", parts...);
    detail::raise(errc::parse, "weft::csv_reader", clip(source_), ":", line, ": ", parts...);
  }

  int get() {
    if (pos_ == end_) {
      if (!in_.good()) return -1;
      in_.read(buf_, sizeof buf_);
      pos_ = 0;
      end_ = static_cast<std::size_t>(in_.gcount());
      if (end_ == 0) return -1;
    }
    return static_cast<unsigned char>(buf_[pos_++]);
  }
  int peek() {
    const int c = get();
    if (c >= 0) --pos_;
    return c;
  }

  // Reads one record into fields_, skipping blank lines. False at the end of input.
  bool read_record() {
    for (;;) {
      fields_.clear();
      std::size_t bytes = 0;
      line_ = next_line_;
      if (first_) {  // a UTF-8 byte-order mark before the header is not part of the first name
        first_ = false;
        if (peek() == 0xEF) {
          get();
          if (get() != 0xBB || get() != 0xBF) fail_at(1, 0, "the input starts with a broken byte-order mark");
        }
      }
      int c = get();
      if (c < 0) return false;
      if (c == '\n' || (c == '\r' && peek() == '\n')) {  // blank line
        if (c == '\r') get();
        ++next_line_;
        continue;
      }
      if (limits_.comment != '\0' && c == limits_.comment) {  // a comment line: skip it, bounded
        for (std::size_t n = 1; c >= 0 && c != '\n'; c = get())
          if (++n > limits_.max_record_bytes)
            fail_at(line_, 0, "comment longer than ", limits_.max_record_bytes,
                    " bytes (csv_limits::max_record_bytes)");
        ++next_line_;
        continue;
      }
      std::string cur;
      bool quoted = false, was_quoted = false;
      for (;; c = get()) {
        if (++bytes > limits_.max_record_bytes)
          fail_at(line_, 0, "record longer than ", limits_.max_record_bytes, " bytes (csv_limits::max_record_bytes)");
        if (quoted) {
          if (c < 0) fail_at(line_, fields_.size() + 1, "unterminated quoted field");
          if (c == '"') {
            if (peek() == '"') {
              get();
              cur.push_back('"');
            } else {
              quoted = false;
            }
          } else {
            if (c == '\n') ++next_line_;
            cur.push_back(static_cast<char>(c));
          }
          continue;
        }
        if (c == '"' && !was_quoted && trim(cur).empty()) {
          quoted = was_quoted = true;
          cur.clear();
          continue;
        }
        const bool end_of_record = c < 0 || c == '\n' || (c == '\r' && (peek() == '\n' || peek() < 0));
        if (c == limits_.separator || end_of_record) {
          if (fields_.size() == limits_.max_fields)
            fail_at(line_, 0, "more than ", limits_.max_fields, " fields (csv_limits::max_fields)");
          fields_.push_back(std::move(cur));
          cur.clear();
          was_quoted = false;
          if (end_of_record) {
            if (c == '\r') get();
            if (c >= 0) ++next_line_;
            return true;
          }
          continue;
        }
        if (was_quoted && c != ' ' && c != '\t')
          fail_at(line_, fields_.size() + 1, "characters after the closing quote of a quoted field");
        cur.push_back(static_cast<char>(c));
      }
    }
  }

  std::istream& in_;
  std::string source_;
  csv_limits limits_;
  char buf_[1 << 14];
  std::size_t pos_ = 0, end_ = 0;
  bool first_ = true;
  std::uint64_t line_, next_line_, header_line_ = 1, records_ = 0;
  std::vector<std::string> header_;
  std::vector<std::string> fields_;
};

}  // namespace weft
