// Package layering holds no code: its test checks the module's floors with `go list`, so that a
// change that makes a lower floor import a higher one fails:
//
//   - the transport (p2p), the transfer engine (engine, engine/...) and the messaging
//     conventions between the algorithms and the transport (wire) import neither the collective
//     algorithms (collective, collective/...) nor the process group (pg, pg/...), directly or
//     through another package;
//   - the collective algorithms import neither the transport nor the process group;
//   - wire imports no package of this module;
//   - a package under internal/ imports no package of this module outside internal/ (the
//     commands' implementations live with the commands, in cmd/internal/).
package layering
