package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/heraldhq/herald/core/internal/origins"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestOriginsStayInTheirTenantAndUnderTheCap: as the API role, a tenant
// sees and writes only its own origins; writers racing for the last places
// of one tenant's list leave exactly origins.MaxPerTenant; the preflight's
// and the page's functions answer across tenants without naming one.
func TestOriginsStayInTheirTenantAndUnderTheCap(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, ten := range []string{"a", "b"} {
		if err := store.EnsureTenant(ctx, db.Pool, ten, ""); err != nil {
			t.Fatal(err)
		}
	}
	api, err := pgxpool.New(ctx, db.APIURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	if _, err := store.AddOrigin(ctx, db.Pool, "b", "https://b.example", true); err != nil {
		t.Fatal(err)
	}
	err = store.InTenant(ctx, api, "a", "", func(tx pgx.Tx) error {
		if list, err := store.ListOrigins(ctx, tx, "b"); err != nil || len(list) != 0 {
			return fmt.Errorf("a sees b's origins: %v, %v", list, err)
		}
		if ok, err := store.OriginAllowed(ctx, tx, "b", "https://b.example"); err != nil || ok {
			return fmt.Errorf("a reads b's origin as allowed: %v, %v", ok, err)
		}
		if ok, err := store.OriginListed(ctx, tx, "https://b.example"); err != nil || !ok {
			return fmt.Errorf("herald_origin_listed: %v, %v", ok, err)
		}
		if list, err := store.FrameOrigins(ctx, tx, "b"); err != nil || len(list) != 1 {
			return fmt.Errorf("herald_frame_origins(b): %v, %v", list, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = store.InTenant(ctx, api, "a", "", func(tx pgx.Tx) error {
		_, err := store.AddOrigin(ctx, tx, "b", "https://evil.example", false)
		return err
	})
	if err == nil {
		t.Fatal("tenant a wrote an origin for b")
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO tenant_origins (tenant_id, origin) VALUES ('a', 'https://App.example/')`); err == nil {
		t.Fatal("the database stored an origin in a form browsers never send")
	}

	// 4 writers add 20 origins each to a's list at once: 50 get in.
	var wg sync.WaitGroup
	var mu sync.Mutex
	added, refused := 0, 0
	for wr := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				err := store.InTenant(ctx, api, "a", "", func(tx pgx.Tx) error {
					_, err := store.AddOrigin(ctx, tx, "a", fmt.Sprintf("https://w%d-%d.example", wr, i), false)
					return err
				})
				mu.Lock()
				switch {
				case err == nil:
					added++
				case errors.Is(err, store.ErrTooManyOrigins):
					refused++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	list, err := store.ListOrigins(ctx, db.Pool, "a")
	if err != nil || added != origins.MaxPerTenant || refused != 80-origins.MaxPerTenant || len(list) != origins.MaxPerTenant {
		t.Fatalf("added %d, refused %d, a lists %d (%v); want %d in", added, refused, len(list), err, origins.MaxPerTenant)
	}
}
