#!/bin/sh
# Runs the tests of groups/test_grow.c (gone) and edit.c (there).
echo "see docs/page.md"
