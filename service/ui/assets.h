// The dashboard's static files (service/ui/assets/*), compiled into the binary at build time by
// embed_assets.cmake; service/api/ui_routes.cpp serves them at /ui.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace agentq::ui {

struct asset {
  std::string_view name;          // file name, e.g. "app.js" (served at /ui/app.js)
  std::string_view content_type;  // from the extension, e.g. "text/javascript; charset=utf-8"
  std::string_view etag;          // quoted strong validator: a SHA-256 prefix of body
  std::string_view body;          // the file's bytes
};

// Every embedded file, sorted by name.
std::span<const asset> assets();
// The file with this name; nullptr when there is none.
const asset* find_asset(std::string_view name);

namespace detail {
extern const asset k_assets[];  // defined in the generated agentq_ui_assets.cpp
extern const size_t k_n_assets;
}  // namespace detail

}  // namespace agentq::ui
