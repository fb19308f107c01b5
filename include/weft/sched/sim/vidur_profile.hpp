// Readers of Vidur-format GPU operator profiles (Agrawal et al., "Vidur: A Large-Scale Simulation
// Framework for LLM Inference", MLSys 2024, §4; the CSVs under data/profiling of microsoft/vidur): the
// per-layer MLP/projection/norm times and the NCCL all-reduce times the measured-profile cost model
// uses. The format is documented in docs/sched.md so users can measure their own engine in it.
#pragma once

#include <weft/core/csv.hpp>
#include <weft/sched/sim/all_reduce_profile.hpp>
#include <weft/sched/sim/layer_profile.hpp>
#include <weft/sched/sim/sim_request.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace weft::sched::sim {

/// What the readers take from a profile.
struct profile_read_options {
  std::string statistic = "median";  ///< which `time_stats.<op>.<statistic>` column: median, mean, min, max
  /// When the file has no rows of the requested layer shape at the requested tensor-parallel degree
  /// but exactly one other shape at it, read that one and rescale it to the requested shape
  /// (layer_profile::rescaled); false: that is an error.
  bool rescale_to_shape = false;
};

/// A measured profile for one deployment: the non-attention operators of a layer and, when the
/// deployment is tensor-parallel, the all-reduce between its GPUs.
struct measured_profile {
  layer_profile layer;
  std::optional<all_reduce_profile> all_reduce;
};

namespace detail {

inline void check_statistic(const profile_read_options& o, const char* where) {
  expects(o.statistic == "median" || o.statistic == "mean" || o.statistic == "min" || o.statistic == "max",
          errc::invalid_argument, where, "statistic must be median, mean, min or max, got '", o.statistic, "'");
}

// A positive integer column within `limit`, else a parse error naming file, line and column.
inline std::int64_t read_count(const csv_reader& csv, std::size_t c, std::int64_t limit) {
  const auto v = csv.number<std::int64_t>(c);
  if (v < 1) csv.fail_column(c, v, " must be >= 1");
  if (v > limit) csv.fail_column(c, v, " exceeds the limit ", limit);
  return v;
}

// A time in milliseconds (finite, >= 0; csv_reader refuses NaN and Inf) as seconds.
inline double read_ms(const csv_reader& csv, std::size_t c) {
  const double v = csv.number<double>(c);
  if (v < 0.0) csv.fail_column(c, "time ", v, " ms is negative");
  return v * 1e-3;
}

// Token counts (or sizes) of each group must run one way through the file: all ascending or all
// descending; a repeated count is another measurement of it.
struct monotonic_check {
  std::int64_t last = 0;
  int direction = 0;  // +1 ascending, -1 descending, 0 not yet known
  void next(const csv_reader& csv, std::size_t c, std::int64_t v, const std::string& group) {
    if (last != 0 && v != last) {
      const int d = v > last ? 1 : -1;
      if (direction != 0 && d != direction)
        csv.fail_column(c, v, " after ", last, ": the counts of ", group,
                        " must be monotonic (all ascending or all descending; a repeat is a second measurement)");
      direction = d;
    }
    last = v;
  }
};

inline std::string shape_text(const layer_shape& s) {
  return weft::detail::concat("(n_head ", s.heads, ", n_kv_head ", s.kv_heads, ", n_embd ", s.hidden,
                              ", n_expanded_embd ", s.intermediate, ")");
}

inline layer_profile read_layer(csv_reader& csv, const layer_shape& want, int tp, const profile_read_options& o) {
  const std::size_t heads = csv.column("n_head"), kv = csv.column("n_kv_head"), hidden = csv.column("n_embd"),
                    inter = csv.column("n_expanded_embd"), tokens = csv.column("num_tokens"),
                    tp_col = csv.column("num_tensor_parallel_workers");
  std::array<std::size_t, layer_op_count> op_col{};
  for (std::size_t op = 0; op < layer_op_count; ++op)
    op_col[op] = csv.column(weft::detail::concat("time_stats.", layer_op_names[op], ".", o.statistic));
  using key = std::tuple<int, int, int, int, int>;  // shape, tp
  std::map<key, monotonic_check> order;
  struct sums {
    std::array<double, layer_op_count> op{};
    int count = 0;
  };
  std::map<key, std::map<std::int64_t, sums>> groups;  // every (shape, tp), so a rescale can pick one
  while (csv.next()) {
    const layer_shape s{
        static_cast<int>(read_count(csv, heads, 1 << 20)), static_cast<int>(read_count(csv, kv, 1 << 20)),
        static_cast<int>(read_count(csv, hidden, 1 << 24)), static_cast<int>(read_count(csv, inter, 1 << 26))};
    const int t = static_cast<int>(read_count(csv, tp_col, 4096));
    const std::int64_t n = read_count(csv, tokens, max_request_tokens);
    std::array<double, layer_op_count> ms{};
    for (std::size_t op = 0; op < layer_op_count; ++op) ms[op] = read_ms(csv, op_col[op]);
    const key k{s.heads, s.kv_heads, s.hidden, s.intermediate, t};
    order[k].next(csv, tokens, n, shape_text(s) + " at tensor-parallel degree " + std::to_string(t));
    sums& g = groups[k][n];
    for (std::size_t op = 0; op < layer_op_count; ++op) g.op[op] += ms[op];
    ++g.count;
  }
  auto build = [&](const key& k, const std::map<std::int64_t, sums>& points) {
    std::vector<std::int64_t> ts;
    layer_profile::op_table ops;
    for (const auto& [n, g] : points) {
      ts.push_back(n);
      for (std::size_t op = 0; op < layer_op_count; ++op) ops[op].push_back(g.op[op] / g.count);
    }
    const layer_shape s{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k)};
    return layer_profile(csv.source(), s, std::get<4>(k), std::move(ts), std::move(ops));
  };
  const key exact{want.heads, want.kv_heads, want.hidden, want.intermediate, tp};
  if (auto it = groups.find(exact); it != groups.end()) return build(it->first, it->second);
  std::vector<const std::pair<const key, std::map<std::int64_t, sums>>*> same_tp;
  std::string have;
  for (const auto& g : groups) {
    if (std::get<4>(g.first) == tp) same_tp.push_back(&g);
    have += weft::detail::concat(
        have.empty() ? "" : "; ",
        shape_text({std::get<0>(g.first), std::get<1>(g.first), std::get<2>(g.first), std::get<3>(g.first)}), " at TP ",
        std::get<4>(g.first));
  }
  if (o.rescale_to_shape && same_tp.size() == 1) return build(same_tp[0]->first, same_tp[0]->second).rescaled(want);
  weft::detail::raise(
      errc::not_found, "weft::sched::sim::read_vidur_layer_profile", csv.source(), ": no rows for the layer shape ",
      shape_text(want), " at tensor-parallel degree ", tp,
      " (columns n_head, n_kv_head, n_embd, n_expanded_embd, num_tensor_parallel_workers); the file has ",
      have.empty() ? std::string("no data rows") : have,
      o.rescale_to_shape ? "" : " (profile_read_options::rescale_to_shape may rescale one)");
}

inline all_reduce_profile read_all_reduce(csv_reader& csv, int workers, const profile_read_options& o) {
  const std::size_t time = csv.column(weft::detail::concat("time_stats.all_reduce.", o.statistic)),
                    workers_col = csv.column("num_workers"), size = csv.column("size");
  const std::ptrdiff_t collective = csv.find_column("collective"), per_node = csv.find_column("devices_per_node");
  std::map<int, monotonic_check> order;
  std::map<int, std::map<std::int64_t, std::pair<double, int>>> groups;
  while (csv.next()) {
    if (collective >= 0 && csv.trimmed(static_cast<std::size_t>(collective)) != "all_reduce") continue;
    const int w = static_cast<int>(read_count(csv, workers_col, 1 << 20));
    const std::int64_t n = read_count(csv, size, std::int64_t{1} << 40);
    const double s = read_ms(csv, time);
    // Multi-node rows (GPUs per node below the worker count) measure another network: skipped.
    if (per_node >= 0 && read_count(csv, static_cast<std::size_t>(per_node), 1 << 20) != w) continue;
    order[w].next(csv, size, n, "num_workers " + std::to_string(w));
    auto& [sum, count] = groups[w][n];
    sum += s;
    ++count;
  }
  const auto it = groups.find(workers);
  if (it == groups.end()) {
    std::string have;
    for (const auto& g : groups) have += (have.empty() ? "" : ", ") + std::to_string(g.first);
    weft::detail::raise(errc::not_found, "weft::sched::sim::read_vidur_all_reduce_profile", csv.source(),
                        ": no all_reduce rows for num_workers ", workers, " (column num_workers); the file has ",
                        have.empty() ? std::string("none") : "num_workers " + have);
  }
  std::vector<std::int64_t> sizes;
  std::vector<double> secs;
  for (const auto& [n, sc] : it->second) {
    sizes.push_back(n);
    secs.push_back(sc.first / sc.second);
  }
  return all_reduce_profile(csv.source(), workers, std::move(sizes), std::move(secs));
}

template <class Read>
auto read_profile_file(const std::string& path, const char* where, Read&& read) {
  std::ifstream in(path, std::ios::binary);
  expects(in.good(), errc::io, where, "cannot open '", path, "'");
  csv_reader csv(in, path);
  return read(csv);
}

}  // namespace detail

/// Reads the rows of a Vidur MLP profile (`<gpu>/<org>/<model>/mlp.csv` in Vidur's tree; columns
/// n_head, n_kv_head, n_embd, n_expanded_embd, num_tokens, num_tensor_parallel_workers and
/// time_stats.<op>.<statistic> in ms for the nine operators of layer_op) for one layer shape and
/// tensor-parallel degree; repeated token counts are averaged. Every row of the file is checked: a
/// missing column, a count that is not a positive whole number, a negative, NaN or infinite time, or
/// token counts of one (shape, TP) that are not monotonic is a weft::error(parse) naming source, line
/// and column; a shape or TP the file does not have is weft::error(not_found) listing what it has.
/// Nothing is returned unless all of it is valid. O(rows log rows). Thread-safe.
inline layer_profile read_vidur_layer_profile(std::istream& in, const std::string& source, const layer_shape& shape,
                                              int tensor_parallel, const profile_read_options& o = {}) {
  detail::check_statistic(o, "weft::sched::sim::read_vidur_layer_profile");
  csv_reader csv(in, source);
  return detail::read_layer(csv, shape, tensor_parallel, o);
}

/// As above, from a file; weft::error(io) when it cannot be opened.
inline layer_profile read_vidur_layer_profile(const std::string& path, const layer_shape& shape, int tensor_parallel,
                                              const profile_read_options& o = {}) {
  detail::check_statistic(o, "weft::sched::sim::read_vidur_layer_profile");
  return detail::read_profile_file(path, "weft::sched::sim::read_vidur_layer_profile",
                                   [&](csv_reader& csv) { return detail::read_layer(csv, shape, tensor_parallel, o); });
}

/// Reads a Vidur all-reduce profile (`network/<gpu>_<topology>/all_reduce.csv`; columns
/// time_stats.all_reduce.<statistic> in ms, num_workers, size in fp16 elements, optional collective
/// and devices_per_node) for one worker count. Rows of other collectives and multi-node rows are
/// skipped; repeated sizes averaged; sizes of one worker count must be monotonic. Errors as for
/// read_vidur_layer_profile. O(rows log rows). Thread-safe.
inline all_reduce_profile read_vidur_all_reduce_profile(std::istream& in, const std::string& source, int workers,
                                                        const profile_read_options& o = {}) {
  detail::check_statistic(o, "weft::sched::sim::read_vidur_all_reduce_profile");
  csv_reader csv(in, source);
  return detail::read_all_reduce(csv, workers, o);
}

/// As above, from a file; weft::error(io) when it cannot be opened.
inline all_reduce_profile read_vidur_all_reduce_profile(const std::string& path, int workers,
                                                        const profile_read_options& o = {}) {
  detail::check_statistic(o, "weft::sched::sim::read_vidur_all_reduce_profile");
  return detail::read_profile_file(path, "weft::sched::sim::read_vidur_all_reduce_profile",
                                   [&](csv_reader& csv) { return detail::read_all_reduce(csv, workers, o); });
}

/// Loads the profile of one deployment from a folder laid out as weft's data/vidur/:
/// `<gpu>_<profile_model>_mlp.csv` and, when tensor_parallel > 1, `<gpu>_*all_reduce.csv`. A GPU or
/// model with no file is weft::error(not_found) naming the folder and the (GPU, model) pairs it has.
/// `profile_model` names the file (e.g. "Llama-2-7b-hf"); `shape` selects rows in it (and may be
/// rescaled from another shape with o.rescale_to_shape). O(rows). Thread-safe.
inline measured_profile load_vidur_profile(const std::string& dir, const std::string& gpu,
                                           const std::string& profile_model, const layer_shape& shape,
                                           int tensor_parallel, const profile_read_options& o = {}) {
  namespace fs = std::filesystem;
  const char* where = "weft::sched::sim::load_vidur_profile";
  expects(tensor_parallel >= 1, errc::invalid_argument, where, "tensor_parallel must be >= 1, got ", tensor_parallel);
  expects(fs::is_directory(dir), errc::io, where, "'", dir, "' is not a folder");
  std::vector<std::string> mlp, all_reduce;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 8 && name.ends_with("_mlp.csv")) mlp.push_back(name.substr(0, name.size() - 8));
    if (name.ends_with("all_reduce.csv") && name.starts_with(gpu + "_")) all_reduce.push_back(e.path().string());
  }
  std::sort(mlp.begin(), mlp.end());
  std::sort(all_reduce.begin(), all_reduce.end());
  const std::string want = gpu + "_" + profile_model;
  if (std::find(mlp.begin(), mlp.end(), want) == mlp.end()) {
    std::string have;
    for (const auto& m : mlp) have += (have.empty() ? "" : ", ") + m;
    weft::detail::raise(errc::not_found, where, "no profile for GPU '", gpu, "' and model '", profile_model, "' in '",
                        dir, "' (looked for ", want, "_mlp.csv; it has ", have.empty() ? std::string("none") : have,
                        ")");
  }
  measured_profile p{
      read_vidur_layer_profile((fs::path(dir) / (want + "_mlp.csv")).string(), shape, tensor_parallel, o),
      std::nullopt};
  if (tensor_parallel > 1) {
    expects(!all_reduce.empty(), errc::not_found, where, "no all-reduce profile for GPU '", gpu, "' in '", dir,
            "' (looked for ", gpu, "_*all_reduce.csv)");
    p.all_reduce = read_vidur_all_reduce_profile(all_reduce.front(), tensor_parallel, o);
  }
  return p;
}

}  // namespace weft::sched::sim
