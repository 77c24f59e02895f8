# Extra libraries for the io tests (included by tests/CMakeLists.txt with ${exe} = the test target):
# the tokenizer's pre-tokenizer runs on PCRE2 (Debian: libpcre2-dev).
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
target_link_libraries(${exe} PRIVATE PkgConfig::PCRE2)
