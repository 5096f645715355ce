// Package packaging holds rljail's installation (install.sh: `make
// install`, `make uninstall`) and its Debian package (deb/build-deb.sh:
// `make deb`). Its tests build the package twice and compare the bytes,
// and check what install.sh and the package put where.
package packaging
