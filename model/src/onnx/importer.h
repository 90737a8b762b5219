// The ONNX importer's internals (private to gp_model). One pass over the topologically sorted
// ONNX nodes, after three pre-passes: constant and shape folding (the Shape/Gather/Concat
// arithmetic exporters emit for reshapes), weight inputs (export_params=False), and fused
// patterns that exporters split into many nodes (erf and tanh GELU, decomposed layer norm).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gp/model/builder.h"
#include "gp/model/onnx_import.h"
#include "gp/model/param_layout.h"
#include "onnx/graph_eval.h"
#include "onnx/onnx_pb.h"

namespace gp::model::onnx_detail {

constexpr int kOnnxFloat = 1, kOnnxInt32 = 6, kOnnxInt64 = 7, kOnnxFloat16 = 10, kOnnxDouble = 11,
              kOnnxBfloat16 = 16;
// A folded shape element that equals the (symbolic) batch size.
constexpr double kBatchDim = -1e15;
// The most elements one folded constant tensor may hold (a causal mask of 4096 x 4096): larger
// ones are refused rather than allocated.
constexpr int64_t kMaxFoldElements = int64_t{1} << 24;

std::string sanitize(const std::string& s);
// Inputs of an ONNX node that GraphPipe imports as parameters.
std::vector<int> weight_positions(const onnx::NodeProto& n);
// ONNX types that map element by element; they also take a tensor without the batch axis.
bool elementwise_type(const std::string& t);
// Values of a constant tensor (typed fields or raw little-endian bytes), as doubles.
std::vector<double> values_of(const onnx::TensorProto& t);
const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name);
int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t fallback);
double attr_f(const onnx::NodeProto& n, const std::string& name, double fallback);
std::string attr_s(const onnx::NodeProto& n, const std::string& name, const std::string& fallback);
std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name);
// Ops through which a recurrent layer's W, R or B is a view of its input 0 (Slice, Identity,
// Unsqueeze, Squeeze, Reshape, Flatten); Concat joins several (recurrent.cc).
bool recurrent_weight_view(const std::string& op_type);

// A folded value as an index or size: truncated, NaN as 0 and clamped to +-2^62, so that no
// value of a malformed model makes the conversion undefined (callers range-check the result).
inline int64_t to_index(double v) {
  constexpr double kLimit = 4611686018427387904.0;  // 2^62
  if (!(v == v)) return 0;
  return static_cast<int64_t>(v < -kLimit ? -kLimit : v > kLimit ? kLimit : v);
}

// ONNX Slice's start and end on an axis of `size` for a step of `step`'s sign: negative
// positions count from the end, then going forward both are clamped to [0, size] (end may come
// out below start: an empty slice); going backward start to [0, size - 1], end to [-1, size - 1].
inline std::pair<int64_t, int64_t> slice_bounds(double start, double end, int64_t size,
                                                int64_t step = 1) {
  auto position = [size](double v, int64_t lo, int64_t hi) {
    int64_t p = std::clamp<int64_t>(to_index(v), -size - 1, size + 1);
    if (p < 0) p += size;
    return std::clamp<int64_t>(p, lo, hi);
  };
  if (step < 0) return {position(start, 0, size - 1), position(end, -1, size - 1)};
  return {position(start, 0, size), position(end, 0, size)};
}

// fold_tensor's reason not to fold a float computed from a trained weight (it is trained).
inline constexpr const char* kFromTrainedWeight = "computes from a trained weight";

// Dims for messages: "[4, 5, 8]".
inline std::string dims_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + "]";
}

// The product of dims [from, to) (the element count of a shape by default).
inline int64_t product(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t k = from; k < std::min(to, v.size()); ++k) p *= v[k];
  return p;
}

// Whether `values` are 0, 1, 2, ... (an arange; an index map that keeps every element in place).
inline bool counts_up(const std::vector<double>& values) {
  for (size_t k = 0; k < values.size(); ++k) {
    if (values[k] != static_cast<double>(k)) return false;
  }
  return true;
}

// Whether any of `values` is NaN: in evaluated shape math, a value that depends on the batch size.
inline bool has_nan(const std::vector<double>& values) {
  return std::any_of(values.begin(), values.end(), [](double x) { return std::isnan(x); });
}

// The batch sizes a batch-dependent value is evaluated at: small (a causal mask grows with each),
// and three, so that a value that only happens to fit some (ones(B, T) * (B // 2)) is not taken
// for a constant.
inline constexpr int64_t kProbeBatches[] = {2, 3, 5};

// The first sample's block of `at` (one tensor per batch size of `batches`) laid [before, batch,
// inner, after] row-major, where every sample's block, for every batch, is the same; else why
// not (batch_constants.cc).
std::string one_sample_block(const std::vector<EvalTensor>& at, std::span<const int64_t> batches,
                             int64_t axis, int64_t inner, std::vector<float>* values);

// A folded shape-math value, and whether it is an integer (integer Div truncates).
struct FoldedValue {
  std::vector<double> values;
  bool ints = false;
};
// The value of shape-math node `n` (any folded type but Constant, Shape and CastLike, which read
// the graph) from its inputs' values (an absent optional input: empty); nullopt when the folder
// does not compute this node.
std::optional<FoldedValue> fold_values(const onnx::NodeProto& n,
                                       const std::vector<FoldedValue>& in);

// The value of a Constant node given by a value_float/_int/_floats/_ints attribute; nullopt for
// a tensor attribute (the caller reads that from its initializer table) or none.
std::optional<FoldedValue> constant_attr_value(const onnx::NodeProto& n);
// Shape node `n`'s output for an input of dims `dims`: the dims from its `start` to its `end`.
std::vector<double> shape_range(const onnx::NodeProto& n, const std::vector<double>& dims);
// fold_values of `n` with each named input's value from `lookup` (an absent input: empty);
// nullopt when an input has no value.
std::optional<FoldedValue> fold_node(
    const onnx::NodeProto& n,
    const std::function<std::optional<FoldedValue>(const std::string&)>& lookup);

// ONNX's own shape inference (libonnx) in a child process: adds the value_info it infers for
// tensors the model gives none; a failure adds a warning and leaves the model as it was.
void infer_onnx_shapes(onnx::ModelProto* model, const std::string& path,
                       std::vector<std::string>* warnings);

// The names `n`'s subgraphs (Loop and If bodies) read from the graph around them.
// Folds transposes of a matmul's operands (last two axes) and constant scales of its operands or
// its product into the matmul's transpose_a/transpose_b/alpha, where the matmul is their only
// reader (matmul_folds.cc).
void fold_into_matmuls(ModelGraph* model);
// Folds slices of a transpose into windowed transposes of its input, where slices are all that
// read it (slice_folds.cc).
void fold_slices_into_transposes(ModelGraph* model);
// Drops the ops with these ids, keeping the others' order.
void remove_ops(ModelGraph* model, const std::set<std::string>& ids);
// Drops parameterless ops that nothing reads, and then those that only they read: a constant
// laid over the batch for a reader that took the value otherwise (an LSTM's zero initial state
// expanded over the batch), with its views (batch_constants.cc).
void drop_unread_ops(ModelGraph* model);

std::set<std::string> subgraph_reads(const onnx::NodeProto& n);
// Calls `visit` on `n` and on every node of its subgraphs (Loop and If bodies), nested to a
// bounded depth.
void visit_nested(const onnx::NodeProto& n,
                  const std::function<void(const onnx::NodeProto&)>& visit);

// Whether convert() has a mapping for ONNX op type `t` (given activations for its inputs).
bool mapped_type(const std::string& t);
// How many inputs a mapped ONNX type needs at least (0 for other types).
int min_inputs(const std::string& t);

// A pattern of several ONNX nodes that becomes one operator, emitted at its last node.
struct Fused {
  enum class Kind { kGelu, kLayerNorm, kAttention, kEmbeddingBag, kRowPick };
  Kind kind = Kind::kGelu;
  std::string x;            // the pattern's input tensor
  std::string gamma, beta;  // layer norm: scale and shift weights ("" when absent)
  double epsilon = 1e-5;
  bool exact = false;  // gelu: the erf form (else the tanh approximation)
  // attention: the packed input projection (MatMul weight [E, 3E], bias [3E], columns q, k, v)
  // and the output projection (Gemm weight [E, E], transposed unless out_trans_b; bias [E]).
  std::string in_weight, in_bias, out_weight, out_bias;
  bool out_trans_b = true;
  int64_t heads = 0;
  // embedding bag: the [rows, dim] table, whether bags are averaged (else summed), and whether
  // its ids are padded with -1 (bags of varying length).
  std::string table;
  bool mean = false;
  bool padded = false;
  // row pick (row_pick.cc): the row of x at per-sample position `index`; `row_stride` the
  // scalar the legacy export multiplies the batch's arange by (its rows per sample).
  std::string index, row_stride, arange;
  std::string name;  // of the pattern's first node, which names the operator
};

struct FoldSources;  // dynamo_optimiser.cc: what torch's optimiser folded an initializer from

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string path, OnnxImportOptions options);
  Result<ModelGraph> run();

 private:
  // importer.cc: inputs, weights, folding, lookups, losses, opaque nodes.
  static std::vector<int64_t> dims_of(const onnx::ValueInfoProto& vi);
  static bool batch_first(const onnx::ValueInfoProto& in);
  void find_weight_inputs();
  // Identity or Transpose of a weight (torch's de-duplicated parameters, the weight transposes
  // of train-mode exports): a weight itself, with its values transposed where it has them.
  bool fold_weight_view(const onnx::NodeProto& n);
  // weight_maps.cc: a trained weight moved by Reshape, Transpose, Gather of constant indices
  // and the like, as the flat index into `source` of each element.
  struct WeightMap {
    std::string source;
    EvalTensor index;
  };
  std::optional<WeightMap> weight_index(const std::string& name) const;
  // Whether only element-wise ops read `name`, directly or through nodes that move elements.
  bool feeds_only_elementwise(const std::string& name) const;
  // Node i as a weight map when it only moves the elements of one weight: done, nothing emitted.
  bool fold_weight_map(int i);
  bool weight_map_candidate(int i) const;
  // Node i's inputs for evaluating its map (weights as their indices): the weight, or "" where
  // it reads an activation, two weights or a weight as indices.
  std::string weight_map_inputs(int i, std::map<std::string, EvalValue>* inputs) const;
  bool constant_fits_map(const onnx::NodeProto& n, int k, const EvalTensor& c) const;
  // The map `name`, read by element-wise node i, as an activation without the batch axis;
  // false after refusing node i.
  bool materialize_weight_map(int i, const std::string& name);
  // The nodes reading weight `name`'s values, where each moves its elements into a map (BEiT's
  // two slices of its position table); empty where any reads it otherwise.
  std::vector<int> map_chain_readers(const std::string& name) const;
  // A Slice of a weight that moves are read from, left to the weight maps (packed_params.cc
  // takes the others).
  bool slice_left_to_maps(const onnx::NodeProto& n) const;
  std::map<std::string, WeightMap> weight_maps_;
  // A map's source weight as one tensor, made at its first map and read by every other, so that
  // it stays one parameter: in the first map's shape, and flat; and the sources whose first map
  // was a row lookup (an embedding holds them).
  std::map<std::string, TensorRef> whole_weight_, flat_weight_;
  std::set<std::string> looked_up_weights_;
  // Where a weight view leads: the tensor whose values it shows (through every view) and the
  // parameter source it is (through Transposes only), each with whether it is transposed.
  struct ViewOf {
    std::string values;
    bool values_transposed;
    std::string source;
    bool source_transposed;
  };
  ViewOf resolve_view(const std::string& name) const;
  Status add_input(const onnx::ValueInfoProto& in);
  Status check_initializers() const;
  // Every tensor a node reads is a graph input, an initializer or a node's output.
  Status check_defined() const;
  // Tied weights (one weight read by several operators) and constant-folded conv weights.
  Status check_weight_sharing();
  // torch's dynamo optimiser folds the transpose of a linear's weight into an initializer of its
  // own ("val_93" = lm_head.weight^T). Where the node's fx_node metadata names a parameter that is
  // an initializer too (a head tied with an embedding) and the values are its exact transpose,
  // the folded one becomes a transposed view of it (view_of_), kept in step on export.
  void find_folded_transposes();
  // torch 2.x files with a graph signature: an initializer that is no parameter of it is a
  // constant (buffers, what the optimiser folded from constants) unless the optimiser folded it
  // from one parameter by ops that pass the gradient unchanged (a view, a gather of distinct
  // rows): then it trains as that parameter. Other folds of parameters that nodes read are
  // refused (reported when no node is refused: a static export's traced batch is the better
  // explanation), naming them.
  void classify_torch_initializers();
  // After find_folded_transposes: why the folds cannot train as torch's parameters ("" when they
  // can), also where one parameter is held as several tensors.
  std::string folded_parameters_refused() const;
  void warn_unknown_origin(const onnx::TensorProto& t) const;
  // A fold of parameters a node reads: trained as its parameter, or its refusal recorded.
  void train_or_refuse(const onnx::TensorProto& t, const FoldSources& f);
  std::vector<std::string> fold_refusals_;
  std::map<std::string, std::string> fold_of_;  // trained fold -> the parameter it holds
  std::string legacy_folds_refused_;
  // Legacy torch exports: a constant-folded initializer that repeats values along an axis is
  // refused (a gathered table or a constant; --freeze keeps a constant).
  std::string check_legacy_folds() const;
  // dynamo_optimiser.cc: the placeholder names (p_<name>) of what the graph holds.
  void find_held_parameters();
  // Whether Gemm, Conv or ConvTranspose node i is a torch linear or convolution whose bias the
  // optimiser dropped (all zeros).
  bool dropped_bias(int i) const;
  // A bias the optimiser dropped: `param` of op `id`, `width` zeros, trained; `where` names the
  // node in the import's one warning about them ("node 3 'fc' (Gemm)").
  void train_dropped_bias(const std::string& where, const std::string& id, const std::string& param,
                          int64_t width);
  // Embedding `id` of Gather node i gets the padding_idx of torch's nn.Embedding from the
  // node's metadata (dynamo exports; the legacy exporter keeps none): that row never trains.
  void set_padding_idx(int i, const std::string& id);
  // The one all-zero row of a float table (how torch starts nn.Embedding's padding row), if it
  // has exactly one.
  std::optional<int64_t> sole_zero_row(const std::string& table) const;
  // That warning: how many, the first few by name, what it means (empty when none).
  std::string dropped_biases_warning() const;
  // Graph::build's checks of the finished model, without a copy of its weights (importer.cc).
  Status validate_without_copying_weights(ModelGraph& model) const;
  std::set<std::string> held_params_;
  std::vector<std::string> dropped_biases_;  // where each is (train_dropped_bias)
  // After conversion: the copies of each weight several operators read tie (model.param_ties)
  // when each is the weight element for element; copies in different layouts are refused.
  Status tie_copies();
  void fold_constants();
  // Shape inference of the operators added since op `first`, so that later nodes know the
  // shapes of activations without the model's shape information.
  void infer_new_ops(int first);
  bool fold(const onnx::NodeProto& n);
  // The shape-math folding of fold(): flat 0-D and 1-D values, the batch size symbolic.
  bool fold_flat(const onnx::NodeProto& n);
  // Constant folding with shapes (masks, position ids): `n`'s output as a tensor when every input
  // is a constant tensor; the batch size is NaN in them, and sizes read from it fold nothing.
  bool fold_tensor(const onnx::NodeProto& n, bool flat);
  // Split, SplitToSequence and SequenceAt of constants (constant_splits.cc).
  bool fold_split(const onnx::NodeProto& n);
  // A folded tensor kept: its values, and with `shape_math` for a small 0-D or 1-D one without
  // the unknown batch size (NaN) the flat shape math's copy.
  void keep(const std::string& name, EvalTensor v, bool shape_math = true);
  // Every output node n defines, evaluated from `inputs`.
  Result<std::map<std::string, EvalValue>> evaluate_outputs(
      const onnx::NodeProto& n, const std::map<std::string, EvalValue>& inputs) const;
  // Node n's first output evaluated from `inputs` (nullopt for a sequence or no such output).
  Result<std::optional<EvalTensor>> evaluate_node(
      const onnx::NodeProto& n, const std::map<std::string, EvalValue>& inputs) const;
  // A constant tensor (initializer, Constant node or folded value) with its shape; nullopt for
  // activations, weights without values and tensors beyond kMaxFoldElements.
  std::optional<EvalTensor> const_tensor(const std::string& name) const;
  // A trained weight (not a scalar): an initializer or weight input of a float type with more
  // than one element, or a view of one; Constant nodes are never trained.
  bool param_like(const std::string& name) const;
  // Whether `name` (a float computed from weights) is only compared, through views: then it
  // folds into a constant mask (nanoGPT's registered tril buffer) instead of being trained.
  bool feeds_only_masks(const std::string& name) const;
  // Whether every trained weight `name` is computed from feeds only masks (so none is trained).
  bool only_compared_weights(const std::string& name) const;
  // Whether every reader of `name` is an `end`, or a node `through` passes it on by whose output
  // only such readers read (false for a graph output, and beyond 4096 tensors).
  using NodeTest = std::function<bool(const onnx::NodeProto&, const std::string& input)>;
  bool readers_only(const std::string& name, const NodeTest& end, const NodeTest& through) const;
  Status add_losses();
  // Registered buffers (options.freeze, and those torch's dynamo marks in node metadata): they
  // fold as constants and are never parameters.
  Status find_buffers();
  bool is_buffer(const std::string& name) const { return buffers_.count(name) > 0; }
  std::set<std::string> buffers_;
  std::set<std::string> scalar_params_;  // one-element initializers that are parameters
  bool dynamo_metadata_ = false;         // any node carries torch 2.x's pkg.torch.onnx metadata
  bool from_pytorch_ = false;            // the file says torch wrote it (ModelProto.producer_name)
  bool try_opaque(int i);                // --allow-opaque: node i as an opaque operator
  std::string opaque_why_;  // why the last try_opaque could not (empty: it could, or not asked)

  bool is_weight(const std::string& name) const;
  std::vector<int64_t> weight_dims(const std::string& name) const;
  std::optional<std::vector<float>> float_values(const std::string& name) const;
  std::optional<std::vector<double>> folded(const std::string& name) const;
  // The dims of a value folded at import: a folded tensor's own, else a folded list's length.
  std::optional<std::vector<int64_t>> folded_dims(const std::string& name) const;
  std::optional<double> scalar(const std::string& name) const;
  std::optional<TensorRef> activation(const std::string& name) const;
  // The ONNX shape of a tensor (value_info, graph inputs and outputs); -1 for symbolic dims.
  std::optional<std::vector<int64_t>> onnx_shape(const std::string& name) const;
  // The per-sample shape of a batch-first tensor: its dims after the batch, all known.
  std::optional<std::vector<int64_t>> sample_shape(const std::string& name) const;
  std::optional<int64_t> rank_of(const std::string& name) const;
  // ONNX `axis` of tensor `name` as a per-sample axis; nullopt for the batch axis or an axis out
  // of range (negative axes count from the tensor's rank, which must then be known).
  std::optional<int64_t> sample_axis(const std::string& name, int64_t axis) const;
  int sole_consumer(const std::string& name) const;
  int producer(const std::string& name) const;  // -1 for inputs and initializers
  bool only_consumers_in(const std::string& name, const std::set<int>& nodes) const;
  std::string unique_id(const std::string& wanted, const std::string& fallback);
  std::string where(int i) const;
  void refuse(int i, const std::string& why);
  // Whether node i only computes shapes or constants (Shape, or no activation among its inputs):
  // its refusal is reported by the node that needs its value, which names it.
  bool shape_only(int i) const;
  // Why input `name` has no value, when a shape-only node was refused for it ("" otherwise).
  std::string missing_value(const std::string& name) const;
  Operator& op_by_id(const std::string& id);
  void set_values(const std::string& id, const std::string& param, const std::vector<float>& v);
  // Parameter `param` of op `id` from ONNX tensor `name` in `layout` (model.proto ParamSource;
  // `count` elements for the block layouts): its values where the model has them, and always
  // its source, resolved through Identity/Transpose views to the initializer or weight input.
  using Layout = graphpipe::v1::ParamSource::Layout;
  void take(const std::string& id, const std::string& param, const std::string& name,
            Layout layout = graphpipe::v1::ParamSource::LAYOUT_COPY, int64_t offset = 0,
            int64_t count = 0);
  // One take(): the parameter, the tensor it resolved to, its place there (nullopt where no
  // layout expresses it) and its element count (the weight's for COPY and TRANSPOSE).
  struct Taken {
    std::string op, param, source;
    std::optional<PlacedLayout> at;
    int64_t count = 0;
    int node = -1;  // the ONNX node converted when it was taken
  };
  std::vector<Taken> taken_;
  void add_param_source(const std::string& id, const std::string& param, const std::string& tensor,
                        const PlacedLayout& at);

  // convert.cc: one ONNX node (or the last node of a fused pattern) to catalogue operators.
  // Prepares node i and calls its type's conversion (a table by ONNX type; element-wise types
  // without one go to general()).
  void convert(int i);
  void shape_of(int i, const std::string& id);      // Shape, Size: refused (shape unknown)
  void pass_through(int i, const std::string& id);  // Identity, Dropout
  void pointwise(int i, const std::string& id);     // Relu, Gelu, Sigmoid, Tanh
  // Softmax and LogSoftmax over any per-sample axis; LayerNormalization over the trailing axes.
  void softmax(int i, const std::string& id);
  void log_softmax(int i, const std::string& id);
  void layer_norm(int i, const std::string& id);
  // Layer norm `id` of x (node i's) with torch's affine: `scale` and `shift` (ONNX tensors of
  // `width` values; "" for none) trained where torch has them as parameters, else applied as
  // constants after it (nothing where they are ones and zeros). nullopt: node i refused.
  std::optional<TensorRef> emit_layer_norm(int i, const std::string& id, const TensorRef& x,
                                           double epsilon, const std::string& scale,
                                           const std::string& shift, int64_t width);
  // The per-sample axis of node i's `axis` (of its input 0); refuses node i for the batch axis,
  // an axis out of range or an input of unknown rank.
  std::optional<int64_t> feature_axis(int i, int64_t axis);
  // Softmax's and LogSoftmax's axis per sample (feature_axis); refused (nullopt) when before
  // opset 13 the axis they flatten from is not the last.
  std::optional<int64_t> softmax_axis(int i);
  // A tensor's per-sample rank, the batch's folded dims included.
  int64_t per_sample_rank(const std::string& name) const;
  void add(int i, const std::string& id);
  void concat(int i, const std::string& id);
  void loop(int i, const std::string& id);  // refused, with why
  void emit_fused(int i, const Fused& f);
  void emit_attention(int i, const Fused& f, const TensorRef& x);
  void gemm(int i, const std::string& id);
  void matmul(int i, const std::string& id);
  // Layout ops and linear layers on a tensor without the batch axis (unbatched_ops.cc).
  bool maps_unbatched(const onnx::NodeProto& n) const;
  void unbatched_op(int i, const std::string& id);
  void scale(int i, const std::string& id);
  // `name` as a tensor for a batch of `batch` (batch_constants.cc): constants, the Shape of
  // activations (dims_at_batch) and what the evaluator computes from them; nullopt where it
  // reads an activation's or a weight's values.
  std::optional<EvalTensor> tensor_at_batch(const std::string& name, int64_t batch,
                                            std::map<std::string, EvalTensor>* cache,
                                            int depth = 0) const;
  // `name` for each probe batch (2, 3 and 5); nullopt where one is not computed.
  std::optional<std::vector<EvalTensor>> at_probe_batches(const std::string& name) const;
  // tensor_at_batch of output `name` of node n, from its inputs'.
  std::optional<EvalTensor> node_at_batch(const onnx::NodeProto& n, const std::string& name,
                                          int64_t batch, std::map<std::string, EvalTensor>* cache,
                                          int depth) const;
  // Folds node n where its value depends on the batch size but is the same for every sample
  // (ones(B, T) and its cumulative sum): held in tensors_ with a batch of 1, in sample_consts_.
  bool fold_per_sample(const onnx::NodeProto& n);
  // Why node i cannot read a value of sample_consts_ (empty where it can): element-wise ops
  // take one as a constant where their activations have their batch where it has it (else
  // refused); a table lookup and Expand read it as they read constants; for any other op it
  // becomes a batched constant op, the same row for every sample.
  std::string sample_const_refusal(int i);
  // Why element-wise node i cannot take its sample_consts_ inputs (their batch axis would meet
  // a per-sample axis of an activation); *batched where it reads a batched activation.
  std::string misaligned_sample_const(int i, bool* batched) const;
  // Tile of a constant over the batch: laid_constant.
  void tile(int i, const std::string& id);
  // Node i's output, computed from constants and the batch size, as a constant op laid out as
  // the activations it meets: one axis is batch x k (the batch outermost, k per sample), and
  // every sample's block is the same (BLOOM's ALiBi tiled over the batch with the heads folded
  // into it; Swin's shifted-window mask expanded over batch x windows). Refused otherwise.
  void laid_constant(int i, const std::string& id);
  // Gather node i of the flattened activation x at batch-dependent indices that read it in
  // order (dynamo's as_strided): a view of x; false (nothing emitted) where it is not one.
  bool strided_view(int i, const std::string& id, const TensorRef& x);
  void einsum(int i, const std::string& id);
  void instance_norm(int i, const std::string& id);
  void slice(int i, const std::string& id);
  std::optional<TensorRef> slice_axis(int i, const std::string& id, const TensorRef& x,
                                      int64_t axis, double start, double end, double step);
  void expand(int i, const std::string& id);
  // Expand of an activation (F.normalize's norm.expand_as(x)): a broadcast, as a binary add of
  // zeros of the target's per-sample shape.
  void expand_activation(int i, const std::string& id, const TensorRef& x);
  void split(int i, const std::string& id);
  void split_to_sequence(int i, const std::string& id);
  void sequence_at(int i, const std::string& id);
  // A SplitToSequence's pieces, by its output: [begin, end) along per-sample `axis` of `x`.
  struct Sequence {
    TensorRef x;
    int64_t axis = 0;
    std::vector<std::pair<int64_t, int64_t>> pieces;
    bool squeeze = false;        // pieces of one without keepdims: the axis is dropped
    std::vector<int64_t> shape;  // x's per-sample shape
  };
  std::map<std::string, Sequence> sequences_;
  void embedding_bag(int i, const std::string& id);
  void transpose(int i, const std::string& id);
  void pad(int i, const std::string& id);
  void clip(int i, const std::string& id);
  void reduce(int i, const std::string& id);
  void bias_add(int i, const std::string& id, const TensorRef& x, const std::string& weight);
  // Whether `weight` (not a scalar) is a bias over trailing axes of activation `x`, as bias_add
  // takes it (its leading size-1 axes dropped).
  bool bias_fits(const std::string& x, const std::string& weight) const;
  void gather(int i, const std::string& id);
  // Gather of activation `x` at the constant indices `t` (not a scalar) along a per-sample axis:
  // the gather op, then a reshape when the indices are not a vector.
  void gather_indices(int i, const std::string& id, const TensorRef& x, const EvalTensor& t);
  // GatherND (batch_dims 0) at constant indices [..., k] into k leading per-sample axes.
  void gather_nd(int i, const std::string& id);
  // The axes of a ReduceSum/ReduceMean/Squeeze/Unsqueeze: the attribute, or the constant input
  // (from opset 13, 18 for ReduceMean); nullopt when they are not constant.
  std::optional<std::vector<int64_t>> axes_of(const onnx::NodeProto& n) const;
  void reshape(int i, const std::string& id);
  void conv(int i, const std::string& id);
  void pool(int i, const std::string& id);
  void batch_norm(int i, const std::string& id);
  // vision_ops.cc: ConvTranspose (2-D, group 1) and Resize (torch's nn.Upsample, 4-D NCHW).
  void conv_transpose(int i, const std::string& id);
  void resize(int i, const std::string& id);

  // recurrent.cc: LSTM and GRU unrolled over the static sequence into catalogue ops, each
  // weight one parameter read by every step (see there).
  void recurrent(int i, const std::string& id);
  // Before conversion: claims the nodes that compute only recurrent node i's weights (torch's
  // gate reordering slices of its parameters) and its zero initial states.
  void claim_recurrent_inputs(int i);
  // A weight as flat element ranges of trained tensors, in row-major order, with its dims.
  struct FlatWeight {
    struct Piece {
      std::string tensor;
      int64_t offset = 0, count = 0;
    };
    std::vector<int64_t> dims;
    std::vector<Piece> pieces;
    // The pieces of elements [start, start + count).
    std::vector<Piece> range(int64_t start, int64_t count) const {
      std::vector<Piece> out;
      int64_t at = 0;
      for (const auto& p : pieces) {
        const int64_t lo = std::max(start, at), hi = std::min(start + count, at + p.count);
        if (lo < hi) out.push_back({p.tensor, p.offset + lo - at, hi - lo});
        at += p.count;
      }
      return out;
    }
  };
  struct RnnBlock;
  struct RnnDirection;
  struct RnnSpec;
  struct RnnRun;
  // `name` as flat ranges of trained weights through Slice, Concat and views; why not else.
  Result<FlatWeight> flat_weight(const std::string& name, int depth) const;
  Result<FlatWeight> slice_weight(int p, const FlatWeight& f) const;
  std::optional<std::vector<int64_t>> weight_view_dims(int p, const std::vector<int64_t>& in) const;
  // Shape arithmetic as integers, where the dims it reads are known (the batch need not be).
  std::optional<std::vector<int64_t>> static_ints(const std::string& name, int depth = 0) const;
  // Whether `name` is all zeros (absent, a constant, ConstantOfShape or views of them).
  bool zero_state(const std::string& name, int depth = 0) const;
  Result<RnnBlock> gate_block(const FlatWeight& f, int64_t first, int gates, int64_t rows,
                              int64_t cols, std::vector<int64_t>* gate_at) const;
  Result<std::vector<RnnDirection>> rnn_directions(int i, int gates, int64_t hidden, int64_t input,
                                                   int dirs) const;
  void take_block(const std::string& id, const std::string& param, const RnnBlock& b);
  std::optional<std::vector<std::optional<TensorRef>>> rnn_state(int i, int k, int dirs,
                                                                 int64_t hidden, int64_t layout);
  RnnRun rnn_run(const RnnSpec& s, const RnnDirection& p, int d, int dirs, bool reverse,
                 const TensorRef& x, std::optional<TensorRef> h, std::optional<TensorRef> c);
  void rnn_outputs(int i, const RnnSpec& s, const std::vector<RnnRun>& runs, int64_t layout);

  // general_ops.cc: element-wise ops, comparisons, masks and reductions that no fused or specific
  // mapping takes, onto the catalogue's general ops (unary, binary, compare, where, constant,
  // reduce), constants and weights broadcast against activations as NumPy does.
  struct Operand;
  // Input k of node i as an operand of a general op, or the reason it cannot be one.
  Result<Operand> operand(int i, int k) const;
  // The operands' per-sample shapes, aligned as ONNX aligns them with the batch first; the batch
  // axis must not broadcast against a per-sample axis. Refuses node i (and returns nullopt) else.
  std::optional<std::vector<TensorRef>> general_inputs(int i, const std::string& id,
                                                       std::vector<int> inputs);
  void general(int i, const std::string& id);
  void general_binary(int i, const std::string& id, std::string_view fn);
  void general_unary(int i, const std::string& id, std::string_view fn);
  void general_compare(int i, const std::string& id, std::string_view fn);
  void general_where(int i, const std::string& id);
  void general_reduce(int i, const std::string& id);
  void cast(int i, const std::string& id);
  // GatherElements of a constant of one repeated value at per-sample indices (RoBERTa's token
  // types, a zero buffer gathered at its position ids): that value, the same for every sample.
  void gather_elements(int i, const std::string& id);
  // row_pick.cc: GatherElements of an activation at per-sample indices along a per-sample axis
  // (torch.gather(1, idx): mBART's decoder start, each sample's last token), as a mask of the
  // positions and a sum.
  void gather_elements_picked(int i, const std::string& id);
  // CumSum along a per-sample axis (RoBERTa's position ids count the ids that are not padding).
  void cumsum(int i, const std::string& id);
  void argmax(int i, const std::string& id);  // ArgMax, ArgMin
  // Node i's input 0, a trained weight, as the same tensor for every sample (general_ops.cc);
  // nullopt with node i refused.
  std::optional<TensorRef> trained_operand(int i, const std::string& id);
  // Whether `name` holds integers in ONNX: an integer activation, one held as float32
  // (int_valued_, masks_), or an integer constant.
  bool integer_valued(const std::string& name) const;
  bool integer_arithmetic(const onnx::NodeProto& n) const;
  // An integer activation as float32 for the element-wise ops (one cast per tensor).
  TensorRef as_float(const std::string& name, const TensorRef& x, const std::string& id);
  void logical_not(int i, const std::string& id);
  void is_nan(int i, const std::string& id);
  void hard_sigmoid(int i, const std::string& id);
  // Expand of a constant over the batch (a causal mask to [B, 1, T, T]): a constant op.
  void expand_constant(int i, const std::string& id);
  // Gather of a weight table by constant ids (position ids): an embedding of a constant.
  void constant_lookup(int i, const std::string& id);
  bool expands_lookup_ids(const onnx::NodeProto& n) const;
  // An activation that a constant or a broadcast weight feeding `name`'s consumers can take its
  // batch from: one the consumers read, else the model's first input.
  std::optional<TensorRef> anchor_for(const std::string& name) const;
  // The ONNX element type of activation `name` as the catalogue sees it (float32 unless known).
  graphpipe::v1::DataType dtype_of(const std::string& name) const;

  // packed_params.cc: a Slice (or each output of a Split) of a trained weight by constant bounds
  // that is one contiguous block of it (the q and kv slices torch's cross-attention cuts from
  // in_proj_weight) is a weight view: a parameter of its own, placed in the packed tensor (a
  // RANGE) for export.
  struct SliceView {
    std::string base;  // the weight sliced (never a slice view itself)
    int64_t offset = 0, count = 0;
  };
  std::map<std::string, SliceView> slice_of_;  // by the Slice's output
  // Slices of trained weights that are no such block: why, by output (for the refusal).
  std::map<std::string, std::string> slice_refusals_;
  // A Slice, Split, or SequenceAt of a SplitToSequence (whose node it marks folded) of a weight.
  bool fold_weight_slice(const onnx::NodeProto& n);
  // The node that cuts `n`'s piece: a SequenceAt's SplitToSequence (nullptr for another
  // producer), else `n` itself.
  const onnx::NodeProto* weight_splitter(const onnx::NodeProto& n) const;
  // The blocks a Slice, a Split (one per output) or a SequenceAt (the piece it reads) of a weight
  // selects, as flat weights.
  Result<std::vector<FlatWeight>> weight_slice_blocks(const onnx::NodeProto& n) const;
  Result<std::vector<FlatWeight>> weight_split_blocks(const onnx::NodeProto& n) const;
  // A slice view's values (nullopt where its weight has none).
  std::optional<std::vector<float>> slice_values(const SliceView& s) const;
  // Placement `at` relative to slice view `s` as a placement in the tensor it slices; nullopt
  // where no layout expresses it.
  std::optional<PlacedLayout> place_in_base(PlacedLayout at, const SliceView& s) const;
  // The tensor that a Slice, a Split or a SequenceAt of a SplitToSequence computing `name` cuts
  // it from ("" for any other producer): a graph-only export's packed weight input, read through
  // such slices, is a weight input too.
  std::string sliced_source(const std::string& name) const;
  // take() of parameter source `source` (read as `name`, as `param` of op `id`): for a slice view,
  // its placement `at` moved into the weight it slices, whose name it returns (node current_ is
  // refused where no placement expresses it); else `source` as it is.
  std::string slice_source(const std::string& source, const std::string& name,
                           const std::string& id, const std::string& param,
                           std::optional<PlacedLayout>* at);
  // Whether initializer `name` is a float tensor holding an infinity, NaN or a magnitude of
  // 1e30 or more: an additive attention mask of -inf (nn.Transformer's causal mask) or of
  // torch.finfo(float32).min (SDPA's boolean mask lowered) that torch 2.x's optimiser folded
  // into an initializer of its own. No parameter holds such values: a buffer.
  bool infinite_mask(const std::string& name) const;
  // After conversion: slices of one weight that overlap, or a weight read whole beside a slice
  // of it, are refused; a slice view read by several operators is tied like a weight.
  Status check_packed_slices();

  // patterns.cc: fused patterns found before conversion.
  void find_patterns();
  bool match_gelu(int start);
  bool match_layer_norm(int start);
  // nn.MultiheadAttention as torch exports it: the batch moved to axis 1, a packed QKV MatMul,
  // heads folded into the batch, and back (see patterns.cc).
  bool match_attention(int start);
  struct AttentionMatch;
  void claim(const std::set<int>& nodes, int last, Fused f);
  // row_pick.cc: x[arange(B), v] by either exporter, claimed at its GatherND or Gather node i.
  bool match_row_pick(int i);
  void emit_row_pick(int i, const Fused& f, const TensorRef& x);
  // A position per sample `at` (float32, of `shape` per sample) with a negative one counted
  // from the end of `count` positions, as torch's indexing does; ops named `id`.<part>, each
  // sample's batch taken from `anchor`.
  TensorRef wrap_negative(const std::string& id, const TensorRef& at, const TensorRef& anchor,
                          const std::vector<int64_t>& shape, int64_t count);
  // scatter.cc: slice assignment into activations (ScatterND, ScatterElements). Before
  // conversion, the nodes that compute a scatter's indices from shapes (the batch's arange) and
  // feed only it are claimed (deferred_): folded where they turn out constant, else never
  // converted; the Shape of their outputs folds from index_value_dims, the batch symbolic.
  bool match_batch_scatter(int i);
  std::optional<std::vector<double>> index_value_dims(const std::string& name) const;
  void scatter_nd(int i, const std::string& id);
  // `name` before the nodes that only reshape, broadcast or cast it (added to `nodes`).
  std::string strip_index_plumbing(std::string name, std::set<int>* nodes) const;
  // Whether `name` is Range(0, limit, 1), and whether its limit is the batch size: then each
  // sample's own position in the batch.
  bool range_from_zero(const std::string& name) const;
  // Whether `name` is a constant 0, 1, ... of a static export's batch (its traced arange).
  bool static_arange(const std::string& name) const;
  bool batch_arange(const std::string& name) const;
  // Adds to `nodes` the shape arithmetic between nodes `first` and `last` (exclusive) that is not
  // folded yet and feeds only `nodes`: it belongs to the pattern.
  void absorb_shape_math(std::set<int>* nodes, int first, int last) const;
  // Whether every output of `nodes` but `last`'s is read only by nodes in `inside` (and is no
  // graph output): a pattern's inner tensors may not be needed elsewhere.
  bool stays_inside(const std::set<int>& nodes, int last, const std::set<int>& inside) const;
  // attention_views.cc: nn.MultiheadAttention as torch 2.x exports it (dynamo and TorchScript),
  // matched when its first node, a Transpose of the [batch, sequence, embedding] input, is
  // reached (the input's shape is known then) by following the views symbolically.
  struct ViewTrace;
  struct AttentionViewMatch;
  bool match_attention_views(int start);
  // embedding_bag_loop.cc: nn.EmbeddingBag over [batch, bag] ids, which torch writes as a Loop
  // over the bags (differently per exporter and option); matched by running the loop on probe
  // values and comparing with what embedding_bag computes.
  bool match_embedding_bag_loop(int loop);
  struct LoopRegion;
  std::optional<LoopRegion> loop_region(int loop) const;
  bool bag_loop(const LoopRegion& r, Fused* f) const;
  // The one [rows, dim] table the region gathers from.
  std::optional<std::string> bag_table(const LoopRegion& r) const;
  // Whether the nodes carrying the values of `values` (inputs) or of `table` feed only the
  // region (index arithmetic on the batch size may be shared with other loops).
  bool values_stay_inside(const LoopRegion& r, const std::set<std::string>& values,
                          const std::string& table) const;
  // Runs the region on probe values: whether it averages (else sums) each bag of [batch, bag]
  // ids (offsets empty) or of ids split by an offsets input; nullopt when it computes other.
  std::optional<bool> probe_bag_loop(const LoopRegion& r, const std::string& ids, int64_t bag,
                                     const std::string& offsets, const std::string& table) const;
  // Before the inputs are added: loops that are nn.EmbeddingBag over ids with offsets.
  void find_ragged_bags();
  struct RaggedBag {
    std::string ids, offsets, table;
    bool mean = false;
  };
  std::map<int, RaggedBag> ragged_;             // by loop
  std::map<int, std::string> ragged_refusals_;  // such loops without --max-bag: why refused
  const RaggedBag* ragged_by_input(const std::string& name, bool offsets) const;
  bool is_data_input(const std::string& name) const;
  // Whether `name` is integer ids sliced per sample out of a data input by constant indices off
  // the batch axis (DLRM's ids[:, k] of a [batch, tables, bag] input): Gather, Slice, Squeeze,
  // Identity and Cast nodes down to the input. An embedding bag's loop reads such ids like an
  // input of its own; the slice itself is imported as the ops it is.
  bool is_sliced_ids(const std::string& name) const;
  // Their per-sample shape, from the input's through each node; nullopt when not such ids.
  std::optional<std::vector<int64_t>> sliced_ids_shape(const std::string& name) const;
  // Input `input` of `n` as integers when it is a constant.
  std::optional<std::vector<int64_t>> constant_ints(const onnx::NodeProto& n, int input) const;

  // batch_layout.cc: where each activation's batch axis is. Every GraphPipe tensor is per sample;
  // the ONNX tensor it stands for may have its batch at another axis than 0 (a sequence-first
  // transpose, timm's qkv permute), and that axis may hold per-sample dims too (Swin's windows,
  // attention heads folded into the batch): ONNX dim `pos` is outer * batch * inner, row-major.
  // The per-sample tensor has the dims [outer] and [inner] (each only where > 1) in place of
  // that axis: P_b[i.., o, f, ..] = T[i.., (o * batch + b) * inner + f, ..].
  struct BatchLayout {
    int64_t pos = 0;
    int64_t outer = 1, inner = 1;
    bool operator==(const BatchLayout&) const = default;
    bool batch_first() const { return pos == 0 && outer == 1 && inner == 1; }
    // The per-sample dims standing for the batch axis: [outer][inner], each where > 1.
    std::vector<int64_t> fold_dims() const;
    int64_t folded() const { return (outer > 1 ? 1 : 0) + (inner > 1 ? 1 : 0); }
    std::string text() const;  // for messages: "axis 1", "axis 0 (8 x batch x 4)"
  };
  // The layout of activation `name`: set by the views that move the batch (transpose(),
  // reshape()), else derived from its producer's inputs (element-wise ops keep it, counted from
  // the last axis; a Gather or reduce that drops an axis before the batch moves it).
  BatchLayout layout_of(const std::string& name) const;
  BatchLayout derive_layout(int k, const std::string& name) const;
  // The ONNX axis of `name`'s batch; nullopt for a tensor without one.
  std::optional<int64_t> batch_axis(const std::string& name) const;
  // The number of per-sample axes of activation `name`.
  std::optional<int64_t> sample_rank(const std::string& name) const;
  // Why node i (or its fused pattern) cannot take the layouts of its inputs ("" when it can):
  // an op on the batch axis, inputs whose batches do not line up, or an op that maps only
  // batch-first tensors.
  std::string layout_refusal(int i) const;
  // The ONNX dims of `name` for a batch of `batch` (an activation's batch axis as
  // outer * batch * inner); nullopt when a dim is unknown.
  std::optional<std::vector<int64_t>> dims_at_batch(const std::string& name, int64_t batch) const;
  // Shape arithmetic `name` evaluated for a batch of `batch` (Shape of an activation gives
  // dims_at_batch); nullopt where it reads anything else than constants and shapes.
  std::optional<FoldedValue> eval_at_batch(const std::string& name, int64_t batch,
                                           std::map<std::string, FoldedValue>* cache,
                                           int depth = 0) const;
  // The batch size views are evaluated for: a static export's, else a prime no model dim is a
  // multiple of.
  int64_t probe_batch() const;
  // The ONNX output dims of Reshape, Flatten, Squeeze or Unsqueeze node i for the probe batch.
  Result<std::vector<int64_t>> view_target(int i, const std::vector<int64_t>& in,
                                           const BatchLayout& layout) const;
  // Reshape's output dims for `target` (ONNX's: 0 copies an input dim, one -1 is inferred,
  // kBatchDim is the probe batch) from input dims `in`.
  Result<std::vector<int64_t>> reshape_dims(const std::vector<double>& target,
                                            const std::vector<int64_t>& in, bool allowzero) const;
  // A row-major view of `in` (ONNX dims for the probe batch, the batch axis laid out as
  // `layout`) as `target`: the per-sample shape and the layout of the result, or why the view
  // splits the batch or does not fit.
  struct ViewResult {
    std::vector<int64_t> sample;
    BatchLayout layout;
  };
  Result<ViewResult> regroup(const std::vector<int64_t>& in, const BatchLayout& layout,
                             const std::vector<int64_t>& target) const;
  // Records Reshape-like node n's output as `view` of x (a reshape op unless the per-sample
  // shape stays).
  void emit_view(const onnx::NodeProto& n, const std::string& id, const TensorRef& x,
                 const ViewResult& view);
  // For a constant Reshape target of a dynamic export that splits the batch: the view that
  // reads a target dim as the batch size torch's tracer baked in (int(x.shape[0] / k)), and
  // that dim; else why there is none.
  struct TracedBatchView {
    ViewResult view;
    size_t dim = 0;
  };
  Result<TracedBatchView> traced_batch_view(const std::vector<double>& target,
                                            const std::vector<int64_t>& in,
                                            const BatchLayout& layout, bool allowzero) const;
  // A graph output whose batch is not first: a warning (the per-sample tensor is the
  // batch-first one), or why it is refused (a batch folded with per-sample dims).
  Status check_output_layout(const std::string& name);

  const onnx::GraphProto& g_;
  std::string path_;
  OnnxImportOptions options_;
  GraphBuilder b_;
  std::map<std::string, const onnx::TensorProto*> consts_;
  std::map<std::string, std::vector<double>> folded_;
  std::set<std::string> folded_int_;  // folded values of integer type (Div truncates)
  // Folded constant tensors with their shapes (initializers are read from consts_ when needed).
  std::map<std::string, EvalTensor> tensors_;
  // Folded SplitToSequence outputs: their pieces, for the SequenceAt nodes that read them.
  std::map<std::string, std::vector<EvalTensor>> const_sequences_;
  std::set<std::string> param_dep_;                 // folded tensors computed from trained weights
  std::map<std::string, std::string> fold_errors_;  // by output: why its node did not fold
  // Outputs of refused shape-only nodes: the refusal, for the node that needs the value.
  std::map<std::string, std::string> unvalued_;
  // Activations without the batch axis in ONNX (an embedding of constant position ids): the same
  // for every sample, their ONNX shape is the per-sample one.
  std::set<std::string> unbatched_;
  // Folded values computed from the batch size, the same for every sample: their axis 0 is the
  // batch, held with size 1 (ONNX broadcasting gives element-wise ops the same result).
  std::set<std::string> sample_consts_;
  std::set<std::string> masks_;  // float 0/1 activations that ONNX holds as booleans
  // Float32 activations that ONNX holds as integers (exact below 2^24): int64 ids cast for
  // element-wise arithmetic, and what that arithmetic makes of them.
  std::set<std::string> int_valued_;
  // --padding-idx tables a lookup read; tables of a legacy export warned about once, and the
  // warnings' "'table' row r" for each with one all-zero row (a padding row, perhaps).
  std::set<std::string> padding_given_, warned_tables_;
  std::vector<std::string> padding_hints_;
  std::map<std::string, TensorRef> as_float_;  // integer activations cast to float32, by name
  int64_t opset_ = 0;                          // of the default domain
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, int> elem_types_;
  std::set<std::string> weight_inputs_;
  // Every weight view (Identity or Transpose of a weight) by name: its dims, and the tensor it
  // views with whether it transposes it.
  std::map<std::string, std::vector<int64_t>> view_dims_;
  std::map<std::string, std::pair<std::string, bool>> view_of_;
  std::set<std::string> folded_transposes_;  // initializers find_folded_transposes made views
  // Weights that several operators read (by resolved source), with the reading nodes.
  std::map<std::string, std::vector<int>> shared_weights_;
  // Zero padding of a Pad node, by its output, that its Conv or AveragePool consumer absorbs.
  std::map<std::string, std::array<int64_t, 2>> pad_of_;
  int64_t static_batch_ = 0;  // a static export's traced batch size (0: symbolic)
  std::map<std::string, std::vector<int>> consumers_;
  std::map<std::string, int> producer_;  // node index by output name
  std::map<std::string, TensorRef> act_;
  mutable std::map<std::string, BatchLayout> layouts_;    // by activation (see layout_of)
  std::map<std::string, std::vector<TensorSpec>> specs_;  // outputs by operator id
  std::map<int, Fused> fused_;                            // by the pattern's last node
  std::set<std::string> used_ids_;
  std::vector<bool> done_;
  std::vector<std::string> unsupported_;
  std::set<std::string> poisoned_;  // outputs of refused nodes and of nodes fed by them
  // Tensors of one value per sample that a pattern claimed (row_pick.cc): their Shape is
  // [batch].
  std::set<std::string> batch_vectors_;
  // Values computed from the batch size that fold neither as constants nor per sample (the
  // batch's arange): what they feed may still fold per sample (fold_tensor).
  std::set<std::string> batch_dependent_;
  // Constants laid out per batch (laid_constant): activations whose values are still computed
  // from the batch size, for what reads them to fold per sample.
  std::set<std::string> laid_constants_;
  // The nodes match_batch_scatter claimed: folded where they can be, never converted.
  std::set<int> deferred_;
  std::set<std::string> empty_;  // activations without elements (empty slices): Concat drops them
  std::set<std::string> poisoned_shapes_;  // those of them that shape-only nodes compute
  std::map<int, int> loop_helpers_;  // refused loops: how many nodes serving each are refused too
  bool fed_by_refused_ = false;
  int eval_batch_norms_ = 0;  // BatchNormalization nodes in eval form, and the first of them
  std::string first_eval_batch_norm_;
  int current_ = -1;        // the node being converted
  std::string current_id_;  // and the operator id it was given
};

}  // namespace gp::model::onnx_detail
