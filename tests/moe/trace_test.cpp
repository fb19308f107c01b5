#include <weft/moe.hpp>
#include <catch2/catch.hpp>
