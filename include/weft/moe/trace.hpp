// Routing traces: which experts each token chose at each MoE layer. A documented CSV format with a
// writer and a validating reader, and a seeded generator with Zipf expert popularity, temporal
// reuse across tokens and inter-layer correlation (the three properties measured on real MoE routing
// by MoE-Infinity §3, Xue et al. 2024, and "Not All Models Suit Expert Offloading", Liang et al. 2025).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/csv.hpp>
#include <weft/core/error.hpp>
#include <weft/core/random.hpp>
#include <weft/moe/types.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <istream>
#include <ostream>
#include <sstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::moe {

/// A routing trace: tokens in execution order, each with its request id and, for every layer,
/// top_k distinct experts. Storage is flat: experts of token t, layer l start at
/// (t * num_layers + l) * top_k. Not thread-safe to mutate; reads are. append O(L*k), reads O(1).
class routing_trace {
 public:
  routing_trace() = default;
  explicit routing_trace(model_shape shape) : shape_(shape) {
    shape.validate("weft::moe::routing_trace");
    seen_.assign(shape.num_experts, 0);
  }

  /// Appends a token: `experts` holds num_layers * top_k expert ids, layer-major. Throws weft::error
  /// if the size is wrong, an id is out of range, or a layer repeats an expert.
  void append(std::uint64_t request, std::span<const std::uint32_t> experts) {
    constexpr const char* where = "weft::moe::routing_trace::append";
    const std::size_t per_token = std::size_t{shape_.num_layers} * shape_.top_k;
    expects(shape_.num_layers > 0, errc::precondition, where, "the trace has no model shape");
    expects(experts.size() == per_token, errc::invalid_argument, where, "token has ", experts.size(),
            " expert ids; it needs num_layers * top_k = ", per_token);
    for (std::uint32_t l = 0; l < shape_.num_layers; ++l) {
      const auto row = experts.subspan(std::size_t{l} * shape_.top_k, shape_.top_k);
      // Distinctness in O(k): stamp each expert with a generation number (seen_ is scratch).
      if (++generation_ == 0) std::fill(seen_.begin(), seen_.end(), 0), generation_ = 1;
      for (std::size_t j = 0; j < row.size(); ++j) {
        expects(row[j] < shape_.num_experts, errc::out_of_range, where, "token ", num_tokens(), " layer ", l,
                ": unknown expert ", row[j], " (the model has ", shape_.num_experts, ")");
        expects(seen_[row[j]] != generation_, errc::invalid_argument, where, "token ", num_tokens(), " layer ", l,
                " routes to expert ", row[j], " twice; top-k experts are distinct");
        seen_[row[j]] = generation_;
      }
    }
    requests_.push_back(request);
    experts_.insert(experts_.end(), experts.begin(), experts.end());
  }

  const model_shape& shape() const noexcept { return shape_; }
  std::size_t num_tokens() const noexcept { return requests_.size(); }
  /// The request of `token`; weft::error(out_of_range) when token >= num_tokens().
  std::uint64_t request(std::size_t token) const {
    expects(token < requests_.size(), errc::out_of_range, "weft::moe::routing_trace::request", "token ", token,
            " of a trace of ", requests_.size(), " tokens");
    return requests_[token];
  }
  /// The top_k experts of `token` at `layer`. Precondition: token < num_tokens(), layer < num_layers.
  std::span<const std::uint32_t> experts(std::size_t token, std::uint32_t layer) const {
    return std::span<const std::uint32_t>(experts_).subspan((token * shape_.num_layers + layer) * shape_.top_k,
                                                            shape_.top_k);
  }
  /// Every demand lookup the trace implies, in execution order (token, layer, listed expert).
  std::vector<expert_key> lookups() const {
    std::vector<expert_key> out;
    out.reserve(experts_.size());
    for (std::size_t t = 0; t < num_tokens(); ++t)
      for (std::uint32_t l = 0; l < shape_.num_layers; ++l)
        for (const std::uint32_t e : experts(t, l)) out.push_back({l, e});
    return out;
  }

 private:
  model_shape shape_{};
  std::vector<std::uint64_t> requests_;
  std::vector<std::uint32_t> experts_;
  std::vector<std::uint32_t> seen_;  // scratch for append's distinctness check, one stamp per expert
  std::uint32_t generation_ = 0;
};

// ---- CSV format -------------------------------------------------------------------------------
// Line 1:   # weft-moe-trace v1 layers=<L> experts=<E> top_k=<K>
// Line 2:   token,request,layer,experts
// Then one row per (token, layer), tokens numbered 0,1,2,... in order, layers 0..L-1 in order:
//           <token>,<request>,<layer>,<e1> <e2> ... <eK>
// Expert ids are space-separated, distinct, < E. Blank lines and lines starting with '#' after the
// first are ignored. The reader checks every rule and names the line that breaks one.

/// Writes `trace` in the CSV format above. Thread-safe for distinct streams. O(size).
inline void write_csv(std::ostream& out, const routing_trace& trace) {
  const model_shape& s = trace.shape();
  out << "# weft-moe-trace v1 layers=" << s.num_layers << " experts=" << s.num_experts << " top_k=" << s.top_k
      << "\ntoken,request,layer,experts\n";
  for (std::size_t t = 0; t < trace.num_tokens(); ++t)
    for (std::uint32_t l = 0; l < s.num_layers; ++l) {
      out << t << ',' << trace.request(t) << ',' << l << ',';
      const auto row = trace.experts(t, l);
      for (std::size_t j = 0; j < row.size(); ++j) out << (j ? " " : "") << row[j];
      out << '\n';
    }
}

/// Bounds read_csv enforces on a trace header before anything is allocated: far above every
/// published MoE model (DeepSeek-V3: 58 MoE layers x 256 experts, top-8), far below what would
/// exhaust memory in an expert_cache built from the shape.
struct trace_limits {
  std::uint32_t max_layers = 1024;
  std::uint32_t max_experts = 1u << 16;
  std::uint64_t max_grid = std::uint64_t{1} << 22;  ///< layers * experts
  std::uint32_t max_top_k = 1024;
  std::uint64_t max_tokens = std::uint64_t{1} << 32;
};

namespace detail {
// A whole non-negative decimal number of at most 18 digits (so it fits in int64_t: 19 nines do not),
// or -1. Every count the header carries is far smaller; trace_limits bounds it next.
inline std::int64_t parse_count(std::string_view text) noexcept {
  if (text.empty() || text.size() > 18) return -1;
  std::int64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Line 1: "# weft-moe-trace v1 layers=L experts=E top_k=K", read with a bounded getline.
inline model_shape read_trace_header(std::istream& in, const trace_limits& limits) {
  constexpr const char* where = "weft::moe::read_csv";
  std::string line;
  for (int c = in.get(); c != std::char_traits<char>::eof() && c != '\n'; c = in.get()) {
    expects(line.size() < 256, errc::parse, where, "line 1 is longer than 256 bytes; expected '# weft-moe-trace v1 ",
            "layers=L experts=E top_k=K'");
    line.push_back(static_cast<char>(c));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  expects(!line.empty(), errc::parse, where,
          "line 1 is empty; expected '# weft-moe-trace v1 layers=L experts=E top_k=K'");
  std::istringstream head(line);
  std::string hash, magic, version;
  head >> hash >> magic >> version;
  expects(hash == "#" && magic == "weft-moe-trace" && version == "v1", errc::parse, where, "line 1 is '",
          csv_reader::clip(line), "'; expected '# weft-moe-trace v1 layers=L experts=E top_k=K'");
  model_shape s{};
  bool have_l = false, have_e = false, have_k = false;
  std::string field;
  while (head >> field) {
    const auto eq = field.find('=');
    expects(eq != std::string::npos, errc::parse, where, "line 1: field '", csv_reader::clip(field),
            "' is not name=value");
    const std::string_view name = std::string_view(field).substr(0, eq);
    const std::int64_t value = parse_count(std::string_view(field).substr(eq + 1));
    expects(value >= 0, errc::parse, where, "line 1: ", csv_reader::clip(name), " '",
            csv_reader::clip(field.substr(eq + 1)), "' is not a non-negative integer");
    auto bounded = [&](std::uint32_t limit) {
      check_limit(value, limit, where, field.substr(0, eq).c_str());
      return static_cast<std::uint32_t>(value);
    };
    if (name == "layers")
      s.num_layers = bounded(limits.max_layers), have_l = true;
    else if (name == "experts")
      s.num_experts = bounded(limits.max_experts), have_e = true;
    else if (name == "top_k")
      s.top_k = bounded(limits.max_top_k), have_k = true;
    else
      weft::detail::raise(errc::parse, where, "line 1: unknown field '", csv_reader::clip(name), "'");
  }
  expects(have_l && have_e && have_k, errc::parse, where, "line 1 must give layers, experts and top_k");
  check_limit(std::uint64_t{s.num_layers} * s.num_experts, limits.max_grid, where, "layers * experts");
  s.validate(where);
  return s;
}
}  // namespace detail

/// Reads a trace in the CSV format above (LF or CRLF line ends). Throws weft::error (errc::parse
/// or errc::capacity) naming the line and column of the first malformed row, or the limit a header
/// exceeds; every bound is checked before memory is spent. Thread-safe for distinct streams.
/// O(size).
inline routing_trace read_csv(std::istream& in, const trace_limits& limits = {}) {
  constexpr const char* where = "weft::moe::read_csv";
  const model_shape s = detail::read_trace_header(in, limits);
  csv_reader csv(
      in, "moe trace",
      {.max_record_bytes = 64 + 12 * std::size_t{s.top_k}, .max_fields = 4, .comment = '#', .first_line = 2});
  expects(csv.header() == std::vector<std::string>{"token", "request", "layer", "experts"}, errc::parse, where,
          "line 2 must be 'token,request,layer,experts'");
  routing_trace trace(s);
  std::vector<std::uint32_t> token_experts;
  std::uint64_t token_request = 0, expect_token = 0;
  std::uint32_t expect_layer = 0;
  while (csv.next()) {
    if (csv.size() != 4) csv.fail("the row has ", csv.size(), " columns; expected 4");
    const auto token = csv.number<std::uint64_t>(0);
    const auto request = csv.number<std::uint64_t>(1);
    const auto layer = csv.number<std::uint64_t>(2);
    if (token != expect_token || layer != expect_layer)
      csv.fail("row is token ", token, " layer ", layer, "; expected token ", expect_token, " layer ", expect_layer);
    if (expect_token >= limits.max_tokens)
      csv.fail("more than ", limits.max_tokens, " tokens (trace_limits::max_tokens)");
    if (layer == 0) token_request = request;
    if (request != token_request)
      csv.fail("request ", request, " differs from the request ", token_request, " of the token's layer 0");
    std::istringstream ids{std::string(csv.field(3))};
    std::string id;
    std::size_t count = 0;
    while (ids >> id) {
      const std::int64_t e = detail::parse_count(id);
      if (e < 0) csv.fail_column(3, "expert '", csv_reader::clip(id), "' is not a non-negative integer");
      if (e >= s.num_experts) csv.fail_column(3, "unknown expert ", e, " (the model has ", s.num_experts, ")");
      if (++count > s.top_k) csv.fail_column(3, "more than top_k = ", s.top_k, " experts");
      token_experts.push_back(static_cast<std::uint32_t>(e));
    }
    if (count != s.top_k) csv.fail_column(3, "lists ", count, " experts; top_k is ", s.top_k);
    if (++expect_layer == s.num_layers) {
      try {
        trace.append(token_request, token_experts);
      } catch (const weft::error& e) {
        csv.fail(e.what());
      }
      token_experts.clear();
      expect_layer = 0;
      ++expect_token;
    }
  }
  expects(expect_layer == 0, errc::parse, where, "input ends inside token ", expect_token, " (after layer ",
          expect_layer - 1, ")");
  return trace;
}

// ---- generator --------------------------------------------------------------------------------

/// Parameters of generate_trace. Defaults are the benchmark's (docs/moe.md, bench/moe/).
struct trace_params {
  model_shape shape{16, 64, 2};
  std::uint32_t num_requests = 24;
  std::uint32_t tokens_per_request = 48;
  /// Zipf exponent of expert popularity within a layer (0 = uniform).
  double zipf_s = 0.9;
  /// Requests draw one of num_topics topics; each topic ranks the experts of each layer its own way.
  std::uint32_t num_topics = 4;
  /// Probability that a routed expert repeats the previous token's choice (same request, layer, rank).
  double reuse = 0.35;
  /// Per layer instead of `reuse` (empty: `reuse` at every layer; else one value per layer): real
  /// models repeat more in their middle layers than in their first (Jiang et al. 2024, Table 5).
  std::vector<double> layer_reuse{};
  /// Probability that it follows the expert of the same rank at the previous layer through a fixed
  /// affinity map (inter-layer correlation).
  double layer_correlation = 0.35;
  /// false: one affinity map per layer for the whole model (inter-layer affinity is a property of
  /// the trained weights: Yao et al. 2024, "Exploiting Inter-Layer Expert Affinity"); true: each
  /// topic has its own maps (harder to predict).
  bool topic_affinity = false;
  std::uint64_t seed = 1;
};

/// Generates a routing trace, reproducibly from params.seed. For each token, layer and rank j, the
/// expert is (in order of trial): with probability `reuse` the previous token's rank-j expert at this
/// layer; else with probability `layer_correlation` the affinity image of this token's
/// rank-j expert at the previous layer; else a Zipf(zipf_s) draw over the topic's ranking of the
/// layer. A candidate already chosen for this token and layer falls through to a fresh Zipf draw.
/// Throws weft::error for invalid parameters. O(tokens * L * k) expected time.
inline routing_trace generate_trace(const trace_params& p) {
  constexpr const char* where = "weft::moe::generate_trace";
  const model_shape& s = p.shape;
  s.validate(where);
  expects(p.num_topics >= 1, errc::invalid_argument, where, "num_topics is 0; it must be >= 1");
  expects(p.zipf_s >= 0.0, errc::invalid_argument, where, "zipf_s is ", p.zipf_s, "; it must be >= 0");
  expects(p.reuse >= 0.0 && p.layer_correlation >= 0.0 && p.reuse + p.layer_correlation <= 1.0, errc::invalid_argument,
          where, "reuse (", p.reuse, ") and layer_correlation (", p.layer_correlation, ") must be >= 0 with sum <= 1");
  expects(p.layer_reuse.empty() || p.layer_reuse.size() == s.num_layers, errc::invalid_argument, where,
          "layer_reuse has ", p.layer_reuse.size(), " values; it needs none or one per layer (", s.num_layers, ")");
  for (std::size_t l = 0; l < p.layer_reuse.size(); ++l)
    expects(p.layer_reuse[l] >= 0.0 && p.layer_reuse[l] + p.layer_correlation <= 1.0, errc::invalid_argument, where,
            "layer_reuse[", l, "] (", p.layer_reuse[l], ") must be >= 0 with layer_correlation (", p.layer_correlation,
            ") summing to <= 1");
  weft::rng rng(p.seed);
  const std::uint32_t L = s.num_layers, E = s.num_experts, K = s.top_k;
  // Zipf CDF over ranks 0..E-1.
  std::vector<double> cdf(E);
  double total = 0.0;
  for (std::uint32_t r = 0; r < E; ++r) cdf[r] = (total += 1.0 / std::pow(static_cast<double>(r + 1), p.zipf_s));
  for (double& c : cdf) c /= total;
  // Per topic and layer: a ranking (rank -> expert) and an affinity map (expert -> expert of next layer).
  std::vector<std::uint32_t> ranking(std::size_t{p.num_topics} * L * E), affinity(std::size_t{p.num_topics} * L * E);
  for (std::size_t block = 0; block < std::size_t{p.num_topics} * L; ++block) {
    auto shuffle = [&](std::uint32_t* a) {
      for (std::uint32_t i = 0; i < E; ++i) a[i] = i;
      for (std::uint32_t i = E; i > 1; --i) std::swap(a[i - 1], a[static_cast<std::uint32_t>(rng.below(i))]);
    };
    shuffle(&ranking[block * E]);
    shuffle(&affinity[block * E]);
  }
  auto zipf_rank = [&]() -> std::size_t {
    const auto at = static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), rng.uniform()) - cdf.begin());
    return std::min<std::size_t>(at, E - 1);
  };
  routing_trace trace(s);
  std::vector<std::uint32_t> prev(std::size_t{L} * K), cur(std::size_t{L} * K);
  for (std::uint32_t r = 0; r < p.num_requests; ++r) {
    const auto topic = static_cast<std::uint32_t>(rng.below(p.num_topics));
    for (std::uint32_t t = 0; t < p.tokens_per_request; ++t) {
      for (std::uint32_t l = 0; l < L; ++l) {
        const std::uint32_t* rank = &ranking[(std::size_t{topic} * L + l) * E];
        const double reuse = p.layer_reuse.empty() ? p.reuse : p.layer_reuse[l];
        for (std::uint32_t j = 0; j < K; ++j) {
          const double u = rng.uniform();
          std::uint32_t e;
          if (t > 0 && u < reuse)
            e = prev[std::size_t{l} * K + j];
          else if (l > 0 && u < reuse + p.layer_correlation)
            e = affinity[(std::size_t{p.topic_affinity ? topic : 0} * L + (l - 1)) * E +
                         cur[std::size_t{(l - 1)} * K + j]];
          else
            e = rank[zipf_rank()];
          auto taken = [&](std::uint32_t x) {
            for (std::uint32_t m = 0; m < j; ++m)
              if (cur[std::size_t{l} * K + m] == x) return true;
            return false;
          };
          // Redraw a few times; under extreme skew fall back to the most popular expert still free,
          // so generation always terminates.
          for (int tries = 0; taken(e) && tries < 64; ++tries) e = rank[zipf_rank()];
          for (std::uint32_t at = 0; taken(e); ++at) e = rank[at];
          cur[std::size_t{l} * K + j] = e;
        }
      }
      trace.append(r, cur);
      prev = cur;
    }
  }
  return trace;
}

/// How often consecutive tokens of one request share experts at a layer, as Mixtral's routing analysis
/// measures it (Jiang et al., "Mixtral of Experts", arXiv 2401.04088, 2024, §5, Table 5).
struct repetition {
  double first_choice = 0.0;  ///< token i+1's first-listed expert equals token i's
  double any_choice = 0.0;    ///< token i+1's top_k experts and token i's have one in common
};

/// Per layer, the repetition between each token and the next token of the same request (pairs that
/// cross a request boundary are skipped). The first listed expert of a token is its first choice
/// (a trace lists experts in rank order). All zero when the trace has no such pair. O(tokens * L * k^2).
inline std::vector<repetition> consecutive_repetition(const routing_trace& trace) {
  const std::uint32_t L = trace.shape().num_layers;
  std::vector<repetition> out(L);
  std::size_t pairs = 0;
  for (std::size_t t = 1; t < trace.num_tokens(); ++t) {
    if (trace.request(t) != trace.request(t - 1)) continue;
    ++pairs;
    for (std::uint32_t l = 0; l < L; ++l) {
      const auto a = trace.experts(t - 1, l), b = trace.experts(t, l);
      out[l].first_choice += a[0] == b[0] ? 1.0 : 0.0;
      bool shared = false;
      for (const std::uint32_t x : a)
        for (const std::uint32_t y : b) shared = shared || x == y;
      out[l].any_choice += shared ? 1.0 : 0.0;
    }
  }
  if (pairs > 0)
    for (auto& r : out) {
      r.first_choice /= static_cast<double>(pairs);
      r.any_choice /= static_cast<double>(pairs);
    }
  return out;
}

/// Mixtral-8x7B's routing locality, published: the first-choice repetition between consecutive tokens
/// at layers 0, 15 and 31, averaged over the eight Pile subsets of Jiang et al. 2024, Table 5 (ArXiv,
/// DM Mathematics, Github, Gutenberg, PhilPapers, PubMed Abstracts, StackExchange, Wikipedia:
/// 14.09 %, 26.40 %, 22.68 %; random: 12.5 %), and the same for "first or second choice"
/// (48.04 %, 63.69 %, 50.91 %; random: 46 %).
inline constexpr std::array<double, 3> mixtral_first_choice_repetition = {0.14088, 0.26400, 0.22675};
inline constexpr std::array<double, 3> mixtral_any_choice_repetition = {0.48038, 0.63688, 0.50913};

/// Generator settings for Mixtral-8x7B-like routing (32 layers, 8 experts, top-2): uniform expert
/// popularity (the paper's Figure 7 finds no expert specialised by domain), one topic, no inter-layer
/// affinity (not published), and per-layer reuse chosen so the first-choice repetition matches
/// mixtral_first_choice_repetition at layers 0, 15 and 31, linear between them. With uniform routing
/// a rank repeats by reuse r or by chance, P = r + (1 - r) / 8, so r = (P - 1/8) / (7/8). The
/// "first or second" repetition then follows from r (bench_moe_hit_rate prints both beside the paper).
/// O(layers).
inline trace_params mixtral_trace_params(std::uint32_t num_requests = 24, std::uint32_t tokens_per_request = 48,
                                         std::uint64_t seed = 1) {
  trace_params p;
  p.shape = {32, 8, 2};
  p.num_requests = num_requests;
  p.tokens_per_request = tokens_per_request;
  p.zipf_s = 0.0;
  p.num_topics = 1;
  p.reuse = 0.0;
  p.layer_correlation = 0.0;
  p.seed = seed;
  const auto fit = [](double repeat) { return std::max(0.0, (repeat - 1.0 / 8.0) / (7.0 / 8.0)); };
  const double r0 = fit(mixtral_first_choice_repetition[0]), r15 = fit(mixtral_first_choice_repetition[1]),
               r31 = fit(mixtral_first_choice_repetition[2]);
  p.layer_reuse.resize(32);
  for (std::uint32_t l = 0; l < 32; ++l)
    p.layer_reuse[l] = l <= 15 ? r0 + (r15 - r0) * l / 15.0 : r15 + (r31 - r15) * (l - 15) / 16.0;
  return p;
}

}  // namespace weft::moe
