package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/heraldhq/herald/core/internal/cursor"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
)

// Recipients, their devices and preferences (see directory.go).

// errInvalid rolls back a transaction whose handler has answered already.
var errInvalid = errors.New("answered")

// answerStored answers a recipient with its ETag.
func answerRecipient(w http.ResponseWriter, code int, sr store.StoredRecipient) {
	setETag(w, sr.Version)
	WriteJSON(w, code, sr)
}

func (s *Server) putRecipient(w http.ResponseWriter, r *http.Request) {
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	ifVersion, ok := ifMatch(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r, MaxBody)
	if !ok {
		return
	}
	var rec directory.Recipient
	if ps := withoutMissing(directory.DecodeEntry(body, &rec, "body", entryLimits), "user_id"); len(ps) > 0 {
		invalidEntry(w, "recipient", ps)
		return
	}
	if !samePath(w, "user_id", rec.UserID, userID) {
		return
	}
	rec.UserID = userID
	var sr store.StoredRecipient
	var created bool
	var current int64
	tenant := principalOf(r).Tenant
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		current, created, err = store.PutRecipient(r.Context(), tx, tenant, rec, ifVersion)
		if err != nil {
			return err
		}
		sr, err = store.GetRecipient(r.Context(), tx, tenant, userID, false)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrVersionMismatch):
		preconditionFailed(w, "recipient", current)
	case err != nil:
		s.internal(w, err)
	case created:
		w.Header().Set("Location", "/v1/recipients/"+url.PathEscape(userID))
		answerRecipient(w, http.StatusCreated, sr)
	default:
		answerRecipient(w, http.StatusOK, sr)
	}
}

// patchRecipient applies a JSON merge patch (RFC 7396) to the stored
// entry and writes the result as PUT would, the row locked in between.
// Devices are not part of the stored entry a patch applies to: devices
// it lists are added.
func (s *Server) patchRecipient(w http.ResponseWriter, r *http.Request) {
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	ifVersion, ok := ifMatch(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r, MaxBody)
	if !ok {
		return
	}
	tenant := principalOf(r).Tenant
	var sr store.StoredRecipient
	var current int64
	var notFound, mismatch bool
	err := s.inTenant(r, func(tx pgx.Tx) error {
		old, err := store.GetRecipient(r.Context(), tx, tenant, userID, true)
		if errors.Is(err, store.ErrNotFound) {
			notFound = true
			return err
		}
		if err != nil {
			return err
		}
		if ifVersion > 0 && old.Version != ifVersion {
			current, mismatch = old.Version, true
			return store.ErrVersionMismatch
		}
		base := old.Recipient
		base.Devices, base.DeviceTokens = nil, nil
		doc, _ := json.Marshal(base) // a Recipient always marshals
		merged, ps := directory.MergePatch(doc, body, "body", entryLimits)
		var rec directory.Recipient
		if len(ps) == 0 {
			ps = directory.DecodeEntry(merged, &rec, "body", entryLimits)
		}
		if len(ps) > 0 {
			invalidEntry(w, "recipient", ps)
			return errInvalid
		}
		if !samePath(w, "user_id", rec.UserID, userID) {
			return errInvalid
		}
		if _, _, err := store.PutRecipient(r.Context(), tx, tenant, rec, 0); err != nil {
			return err
		}
		sr, err = store.GetRecipient(r.Context(), tx, tenant, userID, false)
		return err
	})
	switch {
	case errors.Is(err, errInvalid):
	case notFound:
		recipientNotFound(w, userID)
	case mismatch:
		preconditionFailed(w, "recipient", current)
	case err != nil:
		s.internal(w, err)
	default:
		answerRecipient(w, http.StatusOK, sr)
	}
}

func recipientNotFound(w http.ResponseWriter, userID string) {
	Problem(w, http.StatusNotFound, "recipient not found", fmt.Sprintf("this tenant has no recipient %q", clipID(userID)), "user_id")
}

func (s *Server) getRecipient(w http.ResponseWriter, r *http.Request) {
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	var sr store.StoredRecipient
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		sr, err = store.GetRecipient(r.Context(), tx, principalOf(r).Tenant, userID, false)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		recipientNotFound(w, userID)
	case err != nil:
		s.internal(w, err)
	default:
		answerRecipient(w, http.StatusOK, sr)
	}
}

// recipientPage is the answer of GET /v1/recipients.
type recipientPage struct {
	Recipients []store.StoredRecipient `json:"recipients"`
	// NextCursor continues the list; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

func (s *Server) listRecipients(w http.ResponseWriter, r *http.Request) {
	q, ok := Query(w, r, "user_type", "group", "active", "updated_since", "cursor", "limit")
	if !ok {
		return
	}
	var f store.RecipientFilter
	f.UserType, f.Group = q.Get("user_type"), q.Get("group")
	for name, v := range map[string]string{"user_type": f.UserType, "group": f.Group} {
		if msg := directory.CheckID(v); v != "" && msg != "" {
			Problem(w, http.StatusBadRequest, "invalid query parameter", name+": "+msg, name)
			return
		}
	}
	if a := q.Get("active"); a != "" {
		b, err := strconv.ParseBool(a)
		if err != nil || (a != "true" && a != "false") {
			Problem(w, http.StatusBadRequest, "invalid query parameter", "active: want true or false", "active")
			return
		}
		f.Active = &b
	}
	if us := q.Get("updated_since"); us != "" {
		t, err := time.Parse(time.RFC3339Nano, us)
		if err != nil {
			Problem(w, http.StatusBadRequest, "invalid query parameter",
				"updated_since: want an RFC 3339 time such as 2026-11-22T10:00:00Z", "updated_since")
			return
		}
		f.UpdatedSince = t
	}
	limit, ok := listLimit(w, q.Get("limit"))
	if !ok {
		return
	}
	// The cursor is bound to the filters it was made for.
	scope := fmt.Sprintf("recipients|%q|%q|%q|%q", f.UserType, f.Group, q.Get("active"), q.Get("updated_since"))
	after, ok := s.readCursor(w, q.Get("cursor"), scope)
	if !ok {
		return
	}
	var page recipientPage
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		page.Recipients, err = store.ListRecipients(r.Context(), tx, principalOf(r).Tenant, f, after, limit+1)
		return err
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	if len(page.Recipients) > limit {
		page.Recipients = page.Recipients[:limit]
		page.NextCursor = cursor.Encode(s.dir.cursorKey, cursor.Position{ID: page.Recipients[limit-1].UserID, Scope: scope})
	}
	WriteJSON(w, http.StatusOK, page)
}

// readCursor decodes a list's cursor ("" for the first page) into the
// last id of the page before.
func (s *Server) readCursor(w http.ResponseWriter, c, scope string) (string, bool) {
	if c == "" {
		return "", true
	}
	pos, err := cursor.Decode(s.dir.cursorKey, c, scope)
	if err != nil {
		Problem(w, http.StatusBadRequest, "invalid cursor", "cursor: "+err.Error()+" (a cursor works only with the filters it was made for)", "cursor")
		return "", false
	}
	return pos.ID, true
}

// batchResult is the answer of POST /v1/recipients:batch.
type batchResult struct {
	Mode string `json:"mode"`
	// Entries counts the entries read, Written those written, Refused
	// those refused (each listed in Problems).
	Entries  int            `json:"entries"`
	Written  int            `json:"written"`
	Refused  int            `json:"refused"`
	Problems []entryProblem `json:"problems"`
	Dropped  int            `json:"dropped,omitempty"`
}

// batchRecipients upserts directory entries given as JSON lines (the
// JSONL form of a directory file: {"recipient": {...}}, {"member": {...}},
// ...), checked as `directory import` checks a file, references resolved
// against the batch and the tenant's directory. mode=all (the default)
// writes every entry or, when any is refused, none (422 listing every
// problem); mode=partial writes the good entries and lists the refused
// ones.
func (s *Server) batchRecipients(w http.ResponseWriter, r *http.Request) {
	q, ok := Query(w, r, "mode")
	if !ok {
		return
	}
	mode := q.Get("mode")
	switch mode {
	case "":
		mode = "all"
	case "all", "partial":
	default:
		Problem(w, http.StatusBadRequest, "invalid query parameter", "mode: want all (every entry or none) or partial (the good entries)", "mode")
		return
	}
	lim := s.dir.limits
	body, ok := readBody(w, r, lim.MaxBatchBytes)
	if !ok {
		return
	}
	// Count the lines first: an oversized batch is refused unparsed.
	if n := bytes.Count(body, []byte{'\n'}) + 1; n > lim.MaxBatchEntries {
		lines := 0
		for _, l := range bytes.Split(body, []byte{'\n'}) {
			if len(bytes.TrimSpace(l)) > 0 {
				lines++
			}
		}
		if lines > lim.MaxBatchEntries {
			Problem(w, http.StatusRequestEntityTooLarge, "batch too large",
				fmt.Sprintf("the batch holds %d entries, more than %d; split it", lines, lim.MaxBatchEntries), "")
			return
		}
	}
	tenant := principalOf(r).Tenant
	var res *directory.Result
	var parseErr error
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		res, err = directory.Parse(bytes.NewReader(body), "body", directory.Options{
			Format: directory.JSONL,
			Limits: directory.Limits{MaxFileBytes: lim.MaxBatchBytes, MaxLineBytes: int(min(lim.MaxBatchBytes, MaxBody)), MaxDepth: 8},
			Known: func(groups, users []string) (map[string]bool, map[string]bool, error) {
				return store.ExistingDirectoryKeys(r.Context(), tx, tenant, groups, users)
			},
		})
		var ps directory.Problems
		if errors.As(err, &ps) {
			parseErr = err
			return errInvalid
		}
		if err != nil {
			return err
		}
		if mode == "all" && !res.OK() {
			return errInvalid
		}
		return store.ImportDirectory(r.Context(), tx, tenant, &res.Directory)
	})
	if parseErr != nil {
		var ps directory.Problems
		errors.As(parseErr, &ps)
		invalidEntry(w, "batch", ps)
		return
	}
	if err != nil && !errors.Is(err, errInvalid) {
		s.internal(w, err)
		return
	}
	// A line that is not an entry at all (syntax, a limit) has a problem
	// with no entry: it counts as a refused entry too.
	unreadable := 0
	for _, p := range res.Problems {
		if p.Entry == "" {
			unreadable++
		}
	}
	out := batchResult{Mode: mode, Entries: res.Entries + unreadable, Written: res.Entries - res.Bad, Refused: res.Bad + unreadable,
		Problems: entryProblems(res.Problems), Dropped: res.Dropped}
	if errors.Is(err, errInvalid) {
		out.Written = 0
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		writeBody(w, struct {
			Title  string `json:"title"`
			Status int    `json:"status"`
			Detail string `json:"detail"`
			Field  string `json:"field,omitempty"`
			Type   string `json:"type"`
			batchResult
		}{"batch refused", http.StatusUnprocessableEntity,
			fmt.Sprintf("%d of %d entries have problems, and mode=all writes every entry or none: nothing was written", out.Refused, out.Entries),
			firstField(res.Problems), "about:blank", out})
		return
	}
	WriteJSON(w, http.StatusOK, out)
}

func firstField(ps directory.Problems) string {
	if len(ps) == 0 {
		return ""
	}
	return ps[0].Field
}

// deviceList is the answer of GET /v1/recipients/{user_id}/devices.
type deviceList struct {
	Devices []store.StoredDevice `json:"devices"`
}

func (s *Server) addDevice(w http.ResponseWriter, r *http.Request) {
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	body, ok := readBody(w, r, MaxBody)
	if !ok {
		return
	}
	var d directory.Device
	if ps := directory.DecodeEntry(body, &d, "body", entryLimits); len(ps) > 0 {
		invalidEntry(w, "device", ps)
		return
	}
	var sd store.StoredDevice
	var created bool
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		sd, created, err = store.AddDevice(r.Context(), tx, principalOf(r).Tenant, userID, d)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		recipientNotFound(w, userID)
	case err != nil:
		s.internal(w, err)
	case created:
		w.Header().Set("Location", "/v1/recipients/"+url.PathEscape(userID)+"/devices/"+sd.ID)
		WriteJSON(w, http.StatusCreated, sd)
	default:
		WriteJSON(w, http.StatusOK, sd)
	}
}

func (s *Server) listDevices(w http.ResponseWriter, r *http.Request) {
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	var l deviceList
	err := s.inTenant(r, func(tx pgx.Tx) error {
		var err error
		l.Devices, err = store.ListDevices(r.Context(), tx, principalOf(r).Tenant, userID)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		recipientNotFound(w, userID)
	case err != nil:
		s.internal(w, err)
	default:
		WriteJSON(w, http.StatusOK, l)
	}
}

func (s *Server) removeDevice(w http.ResponseWriter, r *http.Request) {
	userID, ok := pathID(w, r, "user_id")
	if !ok {
		return
	}
	deviceID := r.PathValue("device_id")
	if !isDeviceID(deviceID) {
		Problem(w, http.StatusNotFound, "device not found", "device_id: no device has this id (ids are 32 hex digits)", "device_id")
		return
	}
	err := s.inTenant(r, func(tx pgx.Tx) error {
		return store.RemoveDevice(r.Context(), tx, principalOf(r).Tenant, userID, deviceID)
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		Problem(w, http.StatusNotFound, "device not found", fmt.Sprintf("recipient %q of this tenant has no device %s", clipID(userID), deviceID), "device_id")
	case err != nil:
		s.internal(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func isDeviceID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
