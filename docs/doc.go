// Package docs holds rljail's documentation pages (one per concern; the
// README links them). It has no code: its test checks that every relative
// link of the pages and the README leads to a file and heading that exist,
// that nothing in the repository points to a path outside it, and that
// the README stays the short page a newcomer starts from.
package docs
