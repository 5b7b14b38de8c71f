// Layer roles from a config (model-v41.md §1.3; V4 in the same terms) and the V4.1 schedule rules that
// the official reference relies on but never checks (§1.3 rules 1-8): a config that breaks one would
// silently compute garbage, so the loader refuses it naming the rule and the layer.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace dsinfer::model {

// One entry per layer incl. MTP/DSpark stages. Assumes the fields it reads are in range (validate()).
std::vector<LayerRoles> compute_layer_roles(const ModelConfig& config);

// Throws core::Error naming the field and rule. Called by ModelConfig::validate for V4.1 configs after
// the generic bounds checks.
void check_v41_schedule(const ModelConfig& config, const std::string& source);

}  // namespace dsinfer::model
