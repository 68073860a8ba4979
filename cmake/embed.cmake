# Writes the file IN as a C byte array to OUT, for assets served from the
# binary: NAME (a const char[], NUL-terminated) and NAME_len (its length).
# usage: cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
file(READ ${IN} _hex HEX)
string(LENGTH "${_hex}" _n)
math(EXPR _len "${_n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" _bytes "${_bytes}")
file(WRITE ${OUT} "/* Generated from ${IN} by cmake/embed.cmake: do not edit. */\n#include <stddef.h>\nconst char ${NAME}[] = {\n${_bytes}0x00};\nconst size_t ${NAME}_len = ${_len};\n")
