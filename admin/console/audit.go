package console

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/pgoutbox/pgoutbox/admin"
)

// auditLimit is the size of a page of the audit log.
const auditLimit = 50

// auditData is the audit page's data.
type auditData struct {
	Entries []auditRow
	Next    string // the next page's URL, "" on the last page
}

// auditRow is one audit entry with its filter as JSON text.
type auditRow struct {
	admin.AuditEntry
	FilterText string
}

// audit serves the audit log, newest first, by keyset on the entry id.
func (h *handler) audit(w http.ResponseWriter, r *http.Request) {
	var after int64
	if s := r.URL.Query().Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			h.fail(w, r, badRequestf("after must be an audit entry id"))
			return
		}
		after = n
	}
	pg, err := h.cfg.Admin.AuditLog(r.Context(), admin.AuditParams{After: after, Limit: auditLimit})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := auditData{Entries: make([]auditRow, len(pg.Entries))}
	for i, e := range pg.Entries {
		text, _ := json.Marshal(e.Filter) // a map decoded from JSON encodes again
		d.Entries[i] = auditRow{AuditEntry: e, FilterText: string(text)}
	}
	if pg.Next != 0 {
		d.Next = h.cfg.BasePath + "/audit?after=" + strconv.FormatInt(pg.Next, 10)
	}
	h.show(w, r, "audit", h.newPage(w, r, "audit", "Audit log", d))
}
