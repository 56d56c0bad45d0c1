package history

// One line for an operation: what it asked and what came back, as the checker's witnesses
// and the refusals of malformed input quote it.

import (
	"fmt"
	"strings"
)

// Describe says what an operation asked and what came back, in one line.
func Describe(o *Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "stream %d (worker %d via %s) %s", o.Stream, o.Worker, o.Endpoint, o.Kind)
	switch o.Kind {
	case "range":
		fmt.Fprintf(&b, " [%s, %s)", o.Key, o.End)
	case "txn":
		fmt.Fprintf(&b, " if mod(%s)==%d then %s else %s", o.Compare, o.Expect, txnText(o.Then), txnText(o.Else))
	case "put":
		fmt.Fprintf(&b, " %s=%s", o.Key, o.Value)
		if o.Lease != 0 {
			fmt.Fprintf(&b, " lease %x", o.Lease)
		}
	case "revoke", "keepalive":
		fmt.Fprintf(&b, " lease %x (%s)", o.Lease, o.Key)
	default:
		fmt.Fprintf(&b, " %s", o.Key)
	}
	fmt.Fprintf(&b, " at %s-%s: ", Secs(o.Call), Secs(o.Return))
	if o.Status != "ok" {
		fmt.Fprintf(&b, "%s (%s)", o.Status, o.Error)
		return b.String()
	}
	if o.Kind == "txn" {
		fmt.Fprintf(&b, "succeeded=%t ", o.OK)
	}
	if o.Kind == "get" || o.Kind == "sget" || o.Kind == "range" || o.Kind == "txn" {
		var kv []string
		for _, x := range o.KVs {
			kv = append(kv, fmt.Sprintf("%s=%s (mod %d)", x.Key, x.Value, x.Mod))
		}
		if len(kv) == 0 {
			kv = append(kv, "nothing")
		}
		fmt.Fprintf(&b, "read %s ", strings.Join(kv, ", "))
	}
	if o.Kind == "delete" {
		fmt.Fprintf(&b, "deleted %d ", o.Deleted)
	}
	if o.Header != nil {
		fmt.Fprintf(&b, "at revision %d from member %x of cluster %x", o.Header.Revision, o.Header.Member, o.Header.Cluster)
	}
	return b.String()
}

func txnText(ops []TxnOp) string {
	var parts []string
	for _, t := range ops {
		if t.Kind == "put" {
			parts = append(parts, fmt.Sprintf("put %s=%s", t.Key, t.Value))
		} else {
			parts = append(parts, t.Kind+" "+t.Key)
		}
	}
	return "(" + strings.Join(parts, "; ") + ")"
}
