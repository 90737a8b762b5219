// Training data for graph inputs. Without a data source the executor feeds seeded synthetic data
// (init.h fill_input); with one, the values come from the user's files.
//
// NpyDataset reads a directory holding one NumPy array file per graph input op, named
// `<input op id>.npy` (e.g. x.npy, y.target.npy for an imported model's MSE target): C order,
// first axis = samples, the remaining axes the op's per-sample shape (an input of per-sample shape
// [1] may also be a 1-D array), float32 for float inputs and int64 (or int32) for ids and labels.
// Every file holds the same number of samples N. Sample g of the training stream (g = iteration
// * mini_batch + position in the mini-batch) is row perm_e(g mod N) of epoch e = g / N, where
// perm_e is a seeded permutation of [0, N) (or the identity without shuffling): every plan, and
// the reference, sees the same samples in the same order. Files are memory-mapped; a rank maps
// only the files of the input ops it runs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/graph.h"

namespace gp::exec {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Writes `count` samples of graph input `input`, starting at mini-batch position
  // `first_sample` of `iteration`, into `out` (float* or int64_t* by the input's dtype).
  // Allocates nothing.
  virtual void fill(const model::OpNode& input, int64_t iteration, int64_t first_sample,
                    int64_t count, void* out) const = 0;
};

class NpyDataset final : public DataSource {
 public:
  // Maps `dir`/<id>.npy for each of `input_ops` (graph indices of input ops) and checks them:
  // InvalidArgument naming the file for a missing file, a malformed header, a wrong dtype or
  // shape, differing sample counts, fewer samples than `mini_batch`, or an id outside the range
  // its consumer accepts. Without `shuffle` every epoch reads the files' order.
  static Result<std::unique_ptr<NpyDataset>> open(const std::string& dir, const model::Graph& graph,
                                                  const std::vector<int>& input_ops,
                                                  int64_t mini_batch, bool shuffle, uint64_t seed);
  ~NpyDataset() override;
  NpyDataset(const NpyDataset&) = delete;
  NpyDataset& operator=(const NpyDataset&) = delete;

  int64_t samples() const { return samples_; }
  void fill(const model::OpNode& input, int64_t iteration, int64_t first_sample, int64_t count,
            void* out) const override;
  // The file row that sample `g` of the training stream reads.
  int64_t row_of(int64_t g) const;

  struct Array;  // one mapped file

 private:
  NpyDataset() = default;
  std::vector<std::unique_ptr<Array>> arrays_;  // by graph op index (null: not this rank's)
  int64_t samples_ = 0;
  int64_t mini_batch_ = 0;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
};

// The samples `dir` holds, from the header of the first of the graph's input files that reads
// (a stage without inputs learns so how many mini-batches the others run); nullopt when none does.
std::optional<int64_t> dataset_samples(const std::string& dir, const model::Graph& graph);

// The data of a stage: `dir` opened for the input ops among `ops` (graph indices).
Result<std::unique_ptr<NpyDataset>> open_stage_data(const std::string& dir,
                                                    const model::Graph& graph,
                                                    const std::vector<int>& ops, int64_t mini_batch,
                                                    bool shuffle, uint64_t seed);

}  // namespace gp::exec
