// Sequential gradient coding under bursty stragglers (after Krishnan, Ebrahimi, Khisti, ICLR 2023):
// a Gilbert-Elliott straggler process per worker, a new job every round, deadline T rounds. Compares
// fixed codes (classic gradient coding, T = 0) with weft's adaptive sequential_coder for T = 0, 1, 2:
// jobs missed, the mean redundancy chosen and the mean round duration (a task of load L costs L
// units; a round lasts as long as its busiest finishing worker). Writes coding_sequential.csv.
#include <weft/coding.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace weft::coding;

int main() {
  constexpr std::size_t n = 12, rounds = 1500;
  constexpr double p_enter = 0.05, p_stay = 0.6;  // bursty: a slow worker stays slow with probability 0.6
  std::printf(
      "sequential gradient coding: n = %zu, %zu rounds, Gilbert-Elliott stragglers (P[fast->slow] = %.2f, "
      "P[slow->slow] = %.2f); a slow worker finishes nothing that round\n\n",
      n, rounds, p_enter, p_stay);
  // One straggler pattern for every scheme (common random numbers).
  std::vector<std::vector<std::size_t>> finished(rounds);
  {
    detail::rng gen(2023);
    std::vector<char> slow(n, 0);
    for (std::size_t r = 0; r < rounds; ++r) {
      for (std::size_t w = 0; w < n; ++w) {
        slow[w] = gen.uniform() < (slow[w] ? p_stay : p_enter) ? 1 : 0;
        if (!slow[w]) finished[r].push_back(w);
      }
    }
  }
  struct scheme {
    std::string name;
    std::vector<std::size_t> family_s;
    std::size_t deadline;
  };
  const std::vector<scheme> schemes{{"fixed s=1, T=0", {1}, 0},
                                    {"fixed s=2, T=0", {2}, 0},
                                    {"fixed s=3, T=0", {3}, 0},
                                    {"adaptive s<=3, T=0", {0, 1, 2, 3}, 0},
                                    {"adaptive s<=3, T=1", {0, 1, 2, 3}, 1},
                                    {"adaptive s<=3, T=2", {0, 1, 2, 3}, 2}};
  std::ofstream csv(std::string(WEFT_BENCH_OUT) + "/coding_sequential.csv");
  csv << "scheme,deadline,jobs,decoded,missed,mean_s,mean_round_units\n";
  std::printf("%-22s %5s %8s %8s %8s %16s\n", "scheme", "T", "decoded", "missed", "mean s", "mean round units");
  for (const auto& sc : schemes) {
    std::vector<linear_code> family;
    for (std::size_t s : sc.family_s) family.push_back(cyclic_repetition(n, s));
    sequential_coder<linear_code> coder(family, sc.deadline, 16);
    std::size_t decoded = 0, missed = 0;
    double s_sum = 0, round_sum = 0;
    for (std::size_t r = 0; r < rounds; ++r) {
      const auto& plan = coder.begin_round();
      s_sum += static_cast<double>(coder.code(plan[0][0].code_index).stragglers());
      double busiest = 0;
      for (std::size_t w : finished[r]) {
        double units = 0;
        for (const auto& task : plan[w]) units += static_cast<double>(coder.code(task.code_index).load());
        busiest = std::max(busiest, units);
      }
      round_sum += busiest;
      const auto out = coder.end_round(finished[r]);
      decoded += out.decoded.size();
      missed += out.missed.size();
    }
    const double mean_s = s_sum / rounds, mean_round = round_sum / rounds;
    std::printf("%-22s %5zu %8zu %8zu %8.2f %16.2f\n", sc.name.c_str(), sc.deadline, decoded, missed, mean_s,
                mean_round);
    csv << sc.name << ',' << sc.deadline << ',' << rounds << ',' << decoded << ',' << missed << ',' << mean_s << ','
        << mean_round << '\n';
  }
  std::printf("\n(jobs still pending at the end are neither decoded nor missed)\n");
  return 0;
}
