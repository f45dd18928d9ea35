//===- OnnxMutator.cpp - structure-aware mutation of ONNX models ----------===//
//
// Each edit picks one place in the model at random and sets it to a value
// from a small list of boundary cases (0, -1, 2^31, 2^62, INT64_MIN, NaN,
// ...) or to something taken from elsewhere in the same model (another
// value's name, another node's attribute), which is how real-looking but
// inconsistent graphs arise.
//
//===----------------------------------------------------------------------===//

#include "tools/dsc-fuzz/OnnxMutator.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dsc::fuzz {
namespace {

using Rng = std::mt19937_64;

size_t pick(Rng &rng, size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}
bool coin(Rng &rng, unsigned oneIn = 2) { return pick(rng, oneIn) == 0; }

int64_t interestingInt(Rng &rng, int64_t current) {
  static const int64_t kValues[] = {0,
                                    1,
                                    -1,
                                    2,
                                    3,
                                    -2,
                                    7,
                                    64,
                                    255,
                                    1 << 16,
                                    (int64_t)1 << 31,
                                    ((int64_t)1 << 31) - 1,
                                    (int64_t)1 << 32,
                                    (int64_t)1 << 40,
                                    (int64_t)1 << 61,
                                    (int64_t)1 << 62,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()};
  // Neighbours and negation wrap (in uint64_t): INT64_MIN is a value we
  // want to reach, and the mutator itself must be free of UB.
  switch (pick(rng, 4)) {
  case 0:
    return (int64_t)((uint64_t)current + (coin(rng) ? 1 : (uint64_t)-1));
  case 1:
    return (int64_t)(0 - (uint64_t)current);
  default:
    return kValues[pick(rng, std::size(kValues))];
  }
}

float interestingFloat(Rng &rng) {
  static const float kValues[] = {0.0f,
                                  -0.0f,
                                  1.0f,
                                  -1.0f,
                                  0.5f,
                                  1e-30f,
                                  1e30f,
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::denorm_min(),
                                  3e9f};
  return kValues[pick(rng, std::size(kValues))];
}

/// Every value name the graph mentions, so an edit can rewire a node to a
/// name that exists (the interesting case) rather than only to noise.
std::vector<std::string> valueNames(const onnx::GraphProto &g) {
  std::vector<std::string> names;
  for (const auto &i : g.input())
    names.push_back(i.name());
  for (const auto &t : g.initializer())
    names.push_back(t.name());
  for (const auto &n : g.node())
    for (const auto &o : n.output())
      names.push_back(o);
  return names;
}

std::string someName(const onnx::GraphProto &g, Rng &rng) {
  auto names = valueNames(g);
  if (names.empty() || coin(rng, 8))
    return coin(rng) ? "" : "fuzz_value";
  return names[pick(rng, names.size())];
}

/// A ValueInfo of the graph (input, output or value_info), or null.
onnx::ValueInfoProto *someValueInfo(onnx::GraphProto &g, Rng &rng) {
  int total = g.input_size() + g.output_size() + g.value_info_size();
  if (total == 0)
    return nullptr;
  int k = (int)pick(rng, total);
  if (k < g.input_size())
    return g.mutable_input(k);
  k -= g.input_size();
  if (k < g.output_size())
    return g.mutable_output(k);
  return g.mutable_value_info(k - g.output_size());
}

bool mutateDims(onnx::GraphProto &g, Rng &rng) {
  onnx::ValueInfoProto *v = someValueInfo(g, rng);
  if (!v)
    return false;
  auto *shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
  switch (pick(rng, 5)) {
  case 0: // drop a dim (or the whole shape)
    if (shape->dim_size() == 0 || coin(rng, 4)) {
      v->mutable_type()->mutable_tensor_type()->clear_shape();
      return true;
    }
    shape->mutable_dim()->RemoveLast();
    return true;
  case 1: // add a dim
    shape->add_dim()->set_dim_value(interestingInt(rng, 1));
    return true;
  case 2: // a dim becomes symbolic (or loses both fields)
    if (shape->dim_size() == 0)
      return false;
    if (coin(rng))
      shape->mutable_dim(pick(rng, shape->dim_size()))->set_dim_param("N");
    else
      shape->mutable_dim(pick(rng, shape->dim_size()))->Clear();
    return true;
  default: { // a dim gets a boundary value
    if (shape->dim_size() == 0)
      return false;
    auto *d = shape->mutable_dim(pick(rng, shape->dim_size()));
    d->set_dim_value(interestingInt(rng, d->dim_value()));
    return true;
  }
  }
}

bool mutateElemType(onnx::GraphProto &g, Rng &rng) {
  int32_t type = (int32_t)pick(rng, 26); // TensorProto::DataType is 0..23
  if (coin(rng) && g.initializer_size()) {
    g.mutable_initializer(pick(rng, g.initializer_size()))->set_data_type(type);
    return true;
  }
  onnx::ValueInfoProto *v = someValueInfo(g, rng);
  if (!v)
    return false;
  if (coin(rng, 16)) { // not a tensor at all
    v->mutable_type()->mutable_sequence_type();
    return true;
  }
  v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  return true;
}

void mutateAttributeValue(onnx::AttributeProto &a, onnx::GraphProto &g,
                          Rng &rng) {
  switch (pick(rng, 8)) {
  case 0:
    a.set_i(interestingInt(rng, a.i()));
    break;
  case 1:
    a.set_f(interestingFloat(rng));
    break;
  case 2: {
    static const char *kStrings[] = {"",       "NOTSET", "SAME_UPPER", "VALID",
                                     "linear", "tanh",   "none",       "\xff"};
    a.set_s(coin(rng) ? someName(g, rng)
                      : kStrings[pick(rng, std::size(kStrings))]);
    break;
  }
  case 3: // the list of ints: change, grow or shrink it
    if (a.ints_size() && coin(rng)) {
      int k = (int)pick(rng, a.ints_size());
      a.set_ints(k, interestingInt(rng, a.ints(k)));
    } else if (a.ints_size() && coin(rng)) {
      a.mutable_ints()->RemoveLast();
    } else {
      a.add_ints(a.ints_size() && coin(rng) ? a.ints(0)
                                            : interestingInt(rng, 0));
    }
    break;
  case 4:
    if (a.floats_size() && coin(rng))
      a.set_floats(pick(rng, a.floats_size()), interestingFloat(rng));
    else
      a.add_floats(interestingFloat(rng));
    break;
  case 5: // the declared type disagrees with the field that is set
    a.set_type((onnx::AttributeProto_AttributeType)pick(rng, 15));
    break;
  case 6: // a tensor-valued attribute (Constant, ConstantOfShape)
    if (a.has_t()) {
      auto *t = a.mutable_t();
      if (t->dims_size() && coin(rng))
        t->set_dims(pick(rng, t->dims_size()), interestingInt(rng, t->dims(0)));
      else if (t->has_raw_data())
        t->mutable_raw_data()->resize(pick(rng, t->raw_data().size() + 9));
      else
        t->add_dims(interestingInt(rng, 1));
    } else {
      a.mutable_t()->set_data_type(1);
      a.mutable_t()->add_dims(interestingInt(rng, 1));
    }
    break;
  default:
    a.set_name(coin(rng) ? "" : "fuzz_attr");
    break;
  }
}

bool mutateAttribute(onnx::GraphProto &g, Rng &rng) {
  if (g.node_size() == 0)
    return false;
  onnx::NodeProto *n = g.mutable_node(pick(rng, g.node_size()));
  if (n->attribute_size() == 0 || coin(rng, 6)) {
    // Borrow an attribute from another node: plausible names, wrong place.
    const onnx::NodeProto &other = g.node(pick(rng, g.node_size()));
    if (other.attribute_size() == 0)
      return false;
    *n->add_attribute() = other.attribute(pick(rng, other.attribute_size()));
    return true;
  }
  if (coin(rng, 8)) {
    n->mutable_attribute()->DeleteSubrange(pick(rng, n->attribute_size()), 1);
    return true;
  }
  mutateAttributeValue(*n->mutable_attribute(pick(rng, n->attribute_size())), g,
                       rng);
  return true;
}

/// Drop, duplicate, swap, blank or rewire one entry of a name list.
bool mutateNameList(google::protobuf::RepeatedPtrField<std::string> &list,
                    onnx::GraphProto &g, Rng &rng) {
  switch (pick(rng, 5)) {
  case 0:
    if (list.empty())
      return false;
    list.DeleteSubrange(pick(rng, list.size()), 1);
    return true;
  case 1:
    if (list.empty())
      return false;
    *list.Add() = list.Get(pick(rng, list.size()));
    return true;
  case 2:
    if (list.size() < 2)
      return false;
    list.SwapElements(pick(rng, list.size()), pick(rng, list.size()));
    return true;
  case 3:
    if (list.empty())
      return false;
    list.Mutable(pick(rng, list.size()))->clear();
    return true;
  default:
    if (list.empty() || coin(rng, 4))
      *list.Add() = someName(g, rng);
    else
      *list.Mutable(pick(rng, list.size())) = someName(g, rng);
    return true;
  }
}

bool mutateNode(onnx::GraphProto &g, Rng &rng) {
  if (g.node_size() == 0)
    return false;
  int k = (int)pick(rng, g.node_size());
  onnx::NodeProto *n = g.mutable_node(k);
  switch (pick(rng, 8)) {
  case 0:
  case 1:
  case 2:
    return mutateNameList(*n->mutable_input(), g, rng);
  case 3:
    return mutateNameList(*n->mutable_output(), g, rng);
  case 4: // another op on the same operands
    n->set_op_type(g.node(pick(rng, g.node_size())).op_type());
    return true;
  case 5:
    n->set_domain(coin(rng) ? "com.microsoft" : "");
    return true;
  case 6: // remove the node (its outputs become undefined)
    g.mutable_node()->DeleteSubrange(k, 1);
    return true;
  default: // duplicate it (its outputs become defined twice) or reorder
    if (coin(rng))
      *g.add_node() = *n;
    else
      g.mutable_node()->SwapElements(k, pick(rng, g.node_size()));
    return true;
  }
}

bool mutateInitializer(onnx::GraphProto &g, Rng &rng) {
  if (g.initializer_size() == 0)
    return false;
  onnx::TensorProto *t = g.mutable_initializer(pick(rng, g.initializer_size()));
  switch (pick(rng, 7)) {
  case 0: // raw_data shorter or longer than the dims say
    t->mutable_raw_data()->resize(
        coin(rng) ? pick(rng, t->raw_data().size() + 1)
                  : t->raw_data().size() + 1 + pick(rng, 64));
    return true;
  case 1:
    if (t->dims_size() == 0 || coin(rng, 4))
      t->add_dims(interestingInt(rng, 1));
    else
      t->set_dims(pick(rng, t->dims_size()),
                  interestingInt(rng, t->dims(pick(rng, t->dims_size()))));
    return true;
  case 2:
    if (t->dims_size() == 0)
      return false;
    t->mutable_dims()->RemoveLast();
    return true;
  case 3: // typed fields instead of (or next to) raw_data
    if (coin(rng))
      t->clear_raw_data();
    t->add_float_data(interestingFloat(rng));
    if (coin(rng))
      t->add_int64_data(interestingInt(rng, 0));
    return true;
  case 4: // the same name twice
    *g.add_initializer() = *t;
    return true;
  case 5: // a name another value already has, or none
    t->set_name(someName(g, rng));
    return true;
  default:
    return false; // external data: mutateExternalData
  }
}

bool mutateExternalData(onnx::GraphProto &g, Rng &rng) {
  if (g.initializer_size() == 0)
    return false;
  onnx::TensorProto *t = g.mutable_initializer(pick(rng, g.initializer_size()));
  if (t->data_location() != onnx::TensorProto_DataLocation_EXTERNAL ||
      coin(rng, 4)) {
    // weights.bin exists beside the model the fuzzer writes (DscFuzz.cpp).
    t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    t->clear_raw_data();
    t->clear_external_data();
    auto *loc = t->add_external_data();
    loc->set_key("location");
    loc->set_value("weights.bin");
    return true;
  }
  static const char *kKeys[] = {"location", "offset", "length", "checksum",
                                "bogus"};
  static const char *kLocations[] = {
      "weights.bin", "",          "missing.bin",    "../weights.bin",
      ".",           "/dev/zero", "/proc/self/mem", "weights.bin/x"};
  if (coin(rng, 4) || t->external_data_size() == 0) {
    auto *e = t->add_external_data();
    e->set_key(kKeys[pick(rng, std::size(kKeys))]);
    e->set_value(std::to_string(interestingInt(rng, 0)));
    return true;
  }
  auto *e = t->mutable_external_data(pick(rng, t->external_data_size()));
  if (e->key() == "location")
    e->set_value(kLocations[pick(rng, std::size(kLocations))]);
  else if (coin(rng, 8))
    e->set_value(coin(rng) ? "" : "12abc");
  else
    e->set_value(std::to_string(interestingInt(rng, 0)));
  return true;
}

bool mutateOpset(onnx::ModelProto &m, Rng &rng) {
  static const int64_t kVersions[] = {-1, 0,  1,  7,  12, 13, 14,  16,
                                      17, 18, 19, 21, 23, 24, 1000};
  if (m.opset_import_size() == 0 || coin(rng, 6)) {
    auto *o = m.add_opset_import();
    o->set_domain(coin(rng) ? "" : "ai.onnx.ml");
    o->set_version(kVersions[pick(rng, std::size(kVersions))]);
    return true;
  }
  auto *o = m.mutable_opset_import(pick(rng, m.opset_import_size()));
  if (coin(rng, 6))
    o->set_domain(coin(rng) ? "ai.onnx" : "com.example");
  else
    o->set_version(kVersions[pick(rng, std::size(kVersions))]);
  return true;
}

bool mutateGraphIO(onnx::GraphProto &g, Rng &rng) {
  auto &list = coin(rng) ? *g.mutable_input() : *g.mutable_output();
  if (list.empty())
    return false;
  int k = (int)pick(rng, list.size());
  switch (pick(rng, 3)) {
  case 0:
    list.DeleteSubrange(k, 1);
    return true;
  case 1:
    *list.Add() = list.Get(k);
    return true;
  default:
    list.Mutable(k)->set_name(someName(g, rng));
    return true;
  }
}

} // namespace

bool mutateModel(onnx::ModelProto &model, std::mt19937_64 &rng) {
  onnx::GraphProto &g = *model.mutable_graph();
  switch (pick(rng, 10)) {
  case 0:
    return mutateDims(g, rng);
  case 1:
    return mutateElemType(g, rng);
  case 2:
  case 3:
    return mutateAttribute(g, rng);
  case 4:
  case 5:
    return mutateNode(g, rng);
  case 6:
    return mutateInitializer(g, rng);
  case 7:
    return mutateExternalData(g, rng);
  case 8:
    return mutateOpset(model, rng);
  default:
    return mutateGraphIO(g, rng);
  }
}

} // namespace dsc::fuzz
