// Lookup over the embedded dashboard files (see assets.h; the table itself is generated).
#include "ui/assets.h"

namespace agentq::ui {

std::span<const asset> assets() {
  return {detail::k_assets, detail::k_n_assets};
}

const asset* find_asset(std::string_view name) {
  for (const asset& a : assets())
    if (a.name == name) return &a;
  return nullptr;
}

}  // namespace agentq::ui
