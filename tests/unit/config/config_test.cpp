#include <gtest/gtest.h>
#include "config/config.hpp"
TEST(Config, Placeholder) {}
