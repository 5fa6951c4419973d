// scalecomm core: the library's version (setup.py reads it from here).
#pragma once

namespace scalecomm {

constexpr const char* kVersion = "0.1.0";

}  // namespace scalecomm
