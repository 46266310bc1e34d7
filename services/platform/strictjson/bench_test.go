package strictjson_test

import (
	"reflect"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/strictjson"
)

// BenchmarkCheckAnOrder checks a POST /orders body of three lines, as httpapi.Decode does
// for every request.
func BenchmarkCheckAnOrder(b *testing.B) {
	body := []byte(`{"email":"ada@example.com","lines":[{"book_id":"a","quantity":1},{"book_id":"b","quantity":2},{"book_id":"c","quantity":3}]}`)
	t := reflect.TypeFor[order]()
	b.ReportAllocs()
	for b.Loop() {
		if err := strictjson.Check(body, t); err != nil {
			b.Fatal(err)
		}
	}
}
