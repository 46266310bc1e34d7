package main

import (
	"fmt"
	"regexp"
	"unicode"
)

// Rule: a `package.Name` the docs cite is declared in that package.
//
// A code span that is pkg.Name, pkg.Type.Member or either with a call's parentheses
// (`event.New`, `broker.Publisher.PublishBatch`, `outbox.Write(ctx, tx, ev)`), where pkg
// is the name of a Go package of the repository, must name a top-level func, type, var
// or const of a package with that name, or a method of one of its types (the docs cite
// `stock.HandleOrderEvent`, a method of stock's Service, that way); and Member must be a
// method of that type or a field of that struct. Name must be exported, or followed by parentheses: `report.json`,
// `orders.status` and `inbox.sql` are a file, a column and a file. A pkg that is also the
// last element of a standard library package (`http.Handler`) is left alone unless the
// repository's package declares the name.

var citationRe = regexp.MustCompile(`^([a-z][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(\(.*\))?$`)

func checkCitations(r *repo, d *doc) []finding {
	var out []finding
	for _, p := range d.paras {
		for _, s := range p.spans {
			m := citationRe.FindStringSubmatch(s.code)
			if m == nil {
				continue
			}
			pkgName, name, member, call := m[1], m[2], m[3], m[4]
			pkg := r.pkgs[pkgName]
			if pkg == nil || !(unicode.IsUpper(rune(name[0])) || call != "") {
				continue
			}
			switch {
			case !pkg.decls[name] && !(member == "" && pkg.methods[name]):
				if !r.std[pkgName] {
					out = append(out, finding{d.path, s.line, fmt.Sprintf("`%s`: package %s declares no %s", s.code, pkgName, name)})
				}
			case member != "" && pkg.members[name] != nil && !pkg.members[name][member]:
				out = append(out, finding{d.path, s.line, fmt.Sprintf("`%s`: %s.%s has no method or field %s", s.code, pkgName, name, member)})
			}
		}
	}
	return out
}
