// Package docsnippets holds the test that compiles every Go snippet of
// README.md and docs/*.md, so that none can rot: see its test file for
// how a snippet is compiled and how to give it the names it uses. It has
// no code of its own.
package docsnippets
