// Package arch holds no code: its test enforces the dependency direction of
// STYLE.md's layout table (a package imports only the project packages
// below it), as depguard would.
package arch
