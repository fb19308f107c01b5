// The encoding matrix B of a gradient code (n workers x k partitions; worker i sends
// sum_j B_ij g_j, Tandon et al., ICML 2017, Sec. 2) as a small dense row-major matrix of doubles.
// Standard library only, so a user who wants a code and its decoders pays no linear-algebra headers.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>

#include <cstddef>
#include <initializer_list>
#include <span>
#include <vector>

namespace weft::coding {

/// A dense rows x cols matrix of doubles, row-major. A plain value type: not thread-safe to mutate,
/// safe to share const. Element access O(1); construction O(rows * cols).
class coefficient_matrix {
 public:
  coefficient_matrix() = default;

  /// A rows x cols matrix of zeros. Throws weft::error(invalid_argument) when rows * cols
  /// overflows.
  coefficient_matrix(std::size_t rows, std::size_t cols)
      : rows_(rows),
        cols_(cols),
        data_(checked_product<std::size_t>("weft::coding::coefficient_matrix", rows, cols), 0.0) {}

  /// From rows written out, e.g. {{0.5, 1, 0}, {0, 1, -1}, {0.5, 0, 1}}. Throws
  /// weft::error(invalid_argument) naming the row when the rows differ in length.
  coefficient_matrix(std::initializer_list<std::initializer_list<double>> rows)
      : rows_(rows.size()), cols_(rows.size() == 0 ? 0 : rows.begin()->size()) {
    data_.reserve(rows_ * cols_);
    std::size_t i = 0;
    for (const auto& row : rows) {
      expects(row.size() == cols_, errc::invalid_argument, "weft::coding::coefficient_matrix", "row ", i, " has ",
              row.size(), " entries, row 0 has ", cols_);
      data_.insert(data_.end(), row.begin(), row.end());
      ++i;
    }
  }

  /// The n x n identity.
  static coefficient_matrix identity(std::size_t n) {
    coefficient_matrix m(n, n);
    for (std::size_t i = 0; i < n; ++i) m(i, i) = 1.0;
    return m;
  }

  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }
  /// Element (i, j); unchecked (i < rows(), j < cols()).
  double& operator()(std::size_t i, std::size_t j) noexcept { return data_[i * cols_ + j]; }
  double operator()(std::size_t i, std::size_t j) const noexcept { return data_[i * cols_ + j]; }
  /// Row i, unchecked.
  std::span<const double> row(std::size_t i) const noexcept { return {data_.data() + i * cols_, cols_}; }
  std::span<double> row(std::size_t i) noexcept { return {data_.data() + i * cols_, cols_}; }
  /// All elements, row after row.
  std::span<const double> data() const noexcept { return data_; }

  friend bool operator==(const coefficient_matrix&, const coefficient_matrix&) = default;

 private:
  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
  std::vector<double> data_;  // invariant: size() == rows_ * cols_
};

}  // namespace weft::coding
