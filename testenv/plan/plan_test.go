package plan

import (
	"encoding/json"
	"testing"
)

// A bitmap heap scan is one read, through the index of the bitmap index scan under it;
// a sequential scan and an index scan without a condition read the whole of something.
func TestScansNameEachReadAndWhetherItIsByAKey(t *testing.T) {
	const explained = `{"Node Type": "ModifyTable", "Relation Name": "outbox", "Plans": [
	  {"Node Type": "Bitmap Heap Scan", "Relation Name": "outbox", "Alias": "o", "Plans": [
	    {"Node Type": "Bitmap Index Scan", "Index Name": "outbox_published_at", "Index Cond": "(published_at < now())"}]},
	  {"Node Type": "Seq Scan", "Relation Name": "inbox"},
	  {"Node Type": "Index Only Scan", "Relation Name": "outbox", "Index Name": "outbox_ready"}]}`
	var n Node
	if err := json.Unmarshal([]byte(explained), &n); err != nil {
		t.Fatal(err)
	}
	scans := n.Scans()
	if len(scans) != 3 {
		t.Fatalf("scans %v, want 3", scans)
	}
	if s := scans[0]; s.Index != "outbox_published_at" || !s.Bounded() {
		t.Errorf("bitmap heap scan read as %v (bounded %v)", s, s.Bounded())
	}
	if s := scans[1]; s.Bounded() {
		t.Errorf("%v read as bounded", s)
	}
	if s := scans[2]; s.Bounded() {
		t.Errorf("%v (no condition: the whole index) read as bounded", s)
	}
}
