package strictjson_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/strictjson"
)

type line struct {
	BookID   string `json:"book_id"`
	Quantity int8   `json:"quantity"`
}

type order struct {
	Email string `json:"email"`
	Lines []line `json:"lines"`
}

func TestBothChecksRefuseAKeyInAnotherCaseOrGivenTwiceNamingItsPath(t *testing.T) {
	t.Parallel()
	for body, path := range map[string]string{
		`{"Email":"a@b.c"}`:                         "Email",
		`{"email":"a@b.c","email":"e@b.c"}`:         "email",
		`{"lines":[{"book_id":"x","Quantity":1}]}`:  "lines[0].Quantity",
		`{"lines":[{"book_id":"x","book_id":"y"}]}`: "lines[0].book_id",
	} {
		for name, check := range map[string]func([]byte, reflect.Type) error{"Check": strictjson.Check, "CheckKeys": strictjson.CheckKeys} {
			var refused *strictjson.Error
			if err := check([]byte(body), reflect.TypeFor[order]()); !errors.As(err, &refused) || refused.Path != path {
				t.Errorf("%s(%s) = %v, want a refusal at %s", name, body, err, path)
			}
		}
	}
}

func TestOnlyTheFullCheckRefusesValuesAndWhatFollowsTheObject(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"email":"a\u0000@b.c"}`,
		`{"lines":[{"quantity":300}]}`,
		`{"lines":[{"quantity":"1"}]}`,
	} {
		var refused *strictjson.Error
		if err := strictjson.Check([]byte(body), reflect.TypeFor[order]()); !errors.As(err, &refused) {
			t.Errorf("Check(%s) = %v, want a refusal", body, err)
		}
		if err := strictjson.CheckKeys([]byte(body), reflect.TypeFor[order]()); err != nil {
			t.Errorf("CheckKeys(%s) = %v, want the values left to encoding/json", body, err)
		}
	}
	if err := strictjson.Check([]byte(`{"email":"a@b.c"} {}`), reflect.TypeFor[order]()); err == nil {
		t.Error("Check took a second object after the first")
	}
}
