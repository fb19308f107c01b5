// Conditioning of the exact gradient codes: for each (n, s), the condition number of B_F, the
// rounding amplification and the measured float32 decode error, over the n "burst" survivor sets
// (s consecutive stragglers) and over random survivor sets. Compares the deterministic cyclic-MDS
// construction (Raviv et al. 2018), the random one (Tandon et al. 2017, Alg. 2) and hybrid
// repetition. Writes coding_conditioning.csv under WEFT_BENCH_OUT.
#include <weft/coding.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

using namespace weft::coding;

namespace {

struct stats {
  double worst_cond = 0, median_cond = 0, worst_amp = 0, worst_err = 0;
};

stats measure(const linear_code& code, const std::vector<std::vector<std::size_t>>& sets) {
  const std::size_t n = code.num_workers(), dim = 64;
  detail::rng gen(77);
  std::vector<std::vector<float>> partial(code.n_partitions(), std::vector<float>(dim));
  std::vector<double> truth(dim, 0.0);
  for (auto& p : partial)
    for (std::size_t e = 0; e < dim; ++e) truth[e] += (p[e] = static_cast<float>(gen.normal()));
  std::vector<std::vector<float>> msg(n, std::vector<float>(dim));
  for (std::size_t w = 0; w < n; ++w) {
    std::vector<std::span<const float>> in;
    for (std::size_t j : code.assignment(w)) in.emplace_back(partial[j]);
    encode(code, w, in, msg[w]);
  }
  stats st;
  std::vector<double> conds;
  for (const auto& f : sets) {
    auto d = code.try_decoder(f);
    if (!d) {
      st.worst_err = INFINITY;
      continue;
    }
    std::vector<std::span<const float>> in;
    for (std::size_t w : d->survivors) in.emplace_back(msg[w]);
    std::vector<float> out(dim);
    decode(*d, in, out);
    double num = 0, den = 0;
    for (std::size_t e = 0; e < dim; ++e) {
      num += (out[e] - truth[e]) * (out[e] - truth[e]);
      den += truth[e] * truth[e];
    }
    st.worst_err = std::max(st.worst_err, std::sqrt(num / den));
    st.worst_amp = std::max(st.worst_amp, d->amplification);
    conds.push_back(d->condition);
  }
  std::sort(conds.begin(), conds.end());
  if (!conds.empty()) {
    st.worst_cond = conds.back();
    st.median_cond = conds[conds.size() / 2];
  }
  return st;
}

}  // namespace

int main() {
  struct cfg {
    std::size_t n, s;
  };
  const std::string path = std::string(WEFT_BENCH_OUT) + "/coding_conditioning.csv";
  std::ofstream csv(path);
  csv << "n,s,construction,sets,worst_condition,median_condition,worst_amplification,worst_float32_rel_error\n";
  std::printf("Condition number of B_F, rounding amplification and float32 decode error (64-dim random gradients)\n");
  std::printf("burst = the n sets missing s consecutive workers; random = 300 seeded random sets of n - s workers\n\n");
  std::printf("%4s %3s %-24s %-6s %12s %12s %12s %12s\n", "n", "s", "construction", "sets", "worst cond", "median cond",
              "worst amp", "worst err");
  for (const cfg c : {cfg{6, 2}, cfg{10, 3}, cfg{10, 4}, cfg{12, 3}, cfg{16, 4}, cfg{20, 4}, cfg{20, 5}, cfg{30, 5},
                      cfg{40, 5}, cfg{40, 10}}) {
    std::vector<std::vector<std::size_t>> burst, random_sets;
    for (std::size_t first = 0; first < c.n; ++first) {
      std::vector<std::size_t> f;
      for (std::size_t w = 0; w < c.n; ++w)
        if ((w + c.n - first) % c.n >= c.s) f.push_back(w);
      burst.push_back(f);
    }
    detail::rng gen(9);
    for (int t = 0; t < 300; ++t) {
      std::vector<std::size_t> all(c.n);
      std::iota(all.begin(), all.end(), std::size_t{0});
      for (std::size_t i = c.n; i > 1; --i) std::swap(all[i - 1], all[gen.below(i)]);
      all.resize(c.n - c.s);
      random_sets.push_back(all);
    }
    std::vector<std::pair<std::string, linear_code>> codes;
    codes.emplace_back("cyclic MDS", cyclic_repetition(c.n, c.s, cyclic_construction::mds));
    codes.emplace_back("cyclic random (Tandon)", cyclic_repetition(c.n, c.s, cyclic_construction::random, 1));
    codes.emplace_back("hybrid repetition", hybrid_repetition(c.n, c.s));
    for (const auto& [label, code] : codes)
      for (const auto& [set_name, sets] : {std::pair{"burst", &burst}, std::pair{"random", &random_sets}}) {
        const stats st = measure(code, *sets);
        std::printf("%4zu %3zu %-24s %-6s %12.3g %12.3g %12.3g %12.2e\n", c.n, c.s, label.c_str(), set_name,
                    st.worst_cond, st.median_cond, st.worst_amp, st.worst_err);
        csv << c.n << ',' << c.s << ',' << label << ',' << set_name << ',' << st.worst_cond << ',' << st.median_cond
            << ',' << st.worst_amp << ',' << st.worst_err << '\n';
      }
  }
  std::printf("\nwrote %s\n", path.c_str());
  return 0;
}
