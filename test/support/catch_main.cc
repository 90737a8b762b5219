// Compiled once and linked into every CPU test binary (catch.hpp is ~17k lines).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "case_ledger.h"
