package sse

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWriterFramesAndFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec)
	if err := w.Data([]byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if !rec.Flushed {
		t.Error("event was not flushed")
	}
	_ = w.Comment("keep-alive")
	_ = w.Done()
	want := "data: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

type wrapped struct{ http.ResponseWriter }

func (w wrapped) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestWriterFlushesThroughWrapper(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(wrapped{rec})
	_ = w.Data([]byte("x"))
	if !rec.Flushed {
		t.Error("event was not flushed through an Unwrap wrapper")
	}
}
