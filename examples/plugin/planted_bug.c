/*
 * planted_bug.c: the example plugin with one plausible kernel bug, to show what a failing,
 * shrunk report of a plugin looks like. The bug: w13 read as two contiguous halves (gate rows
 * 0..I-1, up rows I..2I-1, a torch chunk(2)) instead of interleaved rows 2j (gate), 2j+1 (up).
 *
 * Built by `make examples` into build/examples/libplanted_bug.so;
 *     inkling-moe fuzz --paths plugin:build/examples/libplanted_bug.so --seconds 10
 * must fail, shrink the case and name routed_h as the first diverging stage.
 */
#define EXAMPLE_NAME "planted_bug"
#define EXAMPLE_DESCRIPTION "the example plugin with w13 split in halves instead of interleaved"
#define EXAMPLE_UP_ROW(j, up, width) ((up) ? (width) + (j) : (j))
#include "example.c"
