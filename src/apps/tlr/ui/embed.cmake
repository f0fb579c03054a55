# Embeds the web UI's static files in the tlr binary (apps layer, build step; CMake only, no
# other tool). Run by src/apps/CMakeLists.txt at build time whenever a file changes:
#   cmake -DSRC_DIR=dir -DFILES=index.html,app.js,style.css -DOUT=ui_assets.cc -P embed.cmake
# Writes OUT: each file as a byte array (NUL-terminated, the NUL not counted) and UiAssets(),
# the table that ui_assets.h declares. index.html is served at "/" as well as by its name.
cmake_minimum_required(VERSION 3.25)
foreach(var SRC_DIR FILES OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "," ";" files "${FILES}")

set(arrays "")
set(table "")
set(i 0)
foreach(name IN LISTS files)
  set(path "${SRC_DIR}/${name}")
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "embed.cmake: ${path} does not exist")
  endif()
  file(READ "${path}" hex HEX)
  # 32 bytes per line, each byte as 0xNN, then a terminating NUL.
  string(REPEAT "[0-9a-f]" 64 line_pattern)
  string(REGEX REPLACE "(${line_pattern})" "\\1\n" hex "${hex}")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(APPEND arrays "// ${name}\nconst unsigned char kData${i}[] = {\n${hex}0x00};\n\n")
  if(name MATCHES "\\.html$")
    set(type "text/html; charset=utf-8")
  elseif(name MATCHES "\\.js$")
    set(type "text/javascript; charset=utf-8")
  elseif(name MATCHES "\\.css$")
    set(type "text/css; charset=utf-8")
  elseif(name MATCHES "\\.svg$")
    set(type "image/svg+xml")
  else()
    set(type "application/octet-stream")
  endif()
  set(view "std::string_view(reinterpret_cast<const char*>(kData${i}), sizeof kData${i} - 1)")
  string(APPEND table "      {\"/${name}\", \"${type}\", ${view}},\n")
  if(name STREQUAL "index.html")
    string(APPEND table "      {\"/\", \"${type}\", ${view}},\n")
  endif()
  math(EXPR i "${i} + 1")
endforeach()

set(text "// Generated at build time by src/apps/tlr/ui/embed.cmake from src/apps/tlr/ui/: do not edit.
#include \"apps/tlr/ui_assets.h\"

namespace tlr::cli {

namespace {

${arrays}}  // namespace

std::span<const UiAsset> UiAssets() {
  static const UiAsset kAssets[] = {
${table}  };
  return kAssets;
}

}  // namespace tlr::cli
")
file(WRITE "${OUT}" "${text}")
