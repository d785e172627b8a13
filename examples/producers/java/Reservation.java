// A reservation and its Herald event in one transaction (JDBC).
//
// Environment: DATABASE_URL (postgres://user:password@host:port/db),
// HERALD_TENANT (demo), RESERVATION_ID (42), HERALD_ENQUEUE (herald_enqueue;
// schema.name for a function in another schema).
// Debian: apt-get install default-jdk-headless libpostgresql-jdbc-java
// Run: java -cp /usr/share/java/postgresql.jar Reservation.java
import java.net.URI;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Properties;

public class Reservation {
    static final String TENANT = env("HERALD_TENANT", "demo");
    static final long RESERVATION_ID = Long.parseLong(env("RESERVATION_ID", "42"));
    static final String FUNCTION = env("HERALD_ENQUEUE", "herald_enqueue");
    static final String EVENT_ID = "reservation-" + RESERVATION_ID + "-requested";
    static final String PAYLOAD = "{\"restaurant_id\": 5, \"customer_name\": \"Rossi\", \"pax\": 4}";

    public static void main(String[] args) throws Exception {
        if (!FUNCTION.matches("[a-z_][a-z0-9_]*(\\.[a-z_][a-z0-9_]*)?")) {
            throw new IllegalArgumentException("HERALD_ENQUEUE: \"" + FUNCTION + "\" is not a function name");
        }
        try (Connection conn = connect(System.getenv("DATABASE_URL"))) {
            conn.setAutoCommit(false); // every statement below is in a transaction until commit or rollback
            String[] event = reserve(conn, false);
            System.out.println("rollback: " + event[0]);
            event = reserve(conn, true);
            System.out.println("commit: " + event[0] + " " + event[1]);
            // The same event again (a retry after a lost COMMIT answer): a repeat.
            event = enqueue(conn);
            conn.commit();
            System.out.println("again: " + event[0] + " " + event[1]);
        }
    }

    // reserve writes the reservation and its event in one transaction.
    static String[] reserve(Connection conn, boolean commit) throws SQLException {
        try {
            try (PreparedStatement st = conn.prepareStatement(
                    "INSERT INTO reservation (id, restaurant_id, customer_name, pax) VALUES (?, 5, 'Rossi', 4)")) {
                st.setLong(1, RESERVATION_ID);
                st.executeUpdate();
            }
            String[] event = enqueue(conn);
            if (commit) {
                conn.commit();
            } else {
                conn.rollback();
            }
            return event;
        } catch (SQLException e) {
            conn.rollback();
            throw e;
        }
    }

    // enqueue calls herald_enqueue in conn's transaction: {outcome, id},
    // the outcome "new", "repeat" or "conflict".
    static String[] enqueue(Connection conn) throws SQLException {
        String sql = "SELECT outcome, id FROM " + FUNCTION + "(tenant_id => ?, event_id => ?, event_type => ?,"
                + " payload => ?::jsonb, aggregate_type => 'reservation', aggregate_id => ?)";
        try (PreparedStatement st = conn.prepareStatement(sql)) {
            st.setString(1, TENANT);
            st.setString(2, EVENT_ID);
            st.setString(3, "RESERVATION_REQUESTED");
            st.setString(4, PAYLOAD);
            st.setString(5, Long.toString(RESERVATION_ID));
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return new String[] {rs.getString("outcome"), Long.toString(rs.getLong("id"))};
            }
        }
    }

    // connect turns postgres://user:password@host:port/db?sslmode=... into
    // JDBC's jdbc:postgresql://host:port/db?sslmode=... and its properties.
    static Connection connect(String url) throws Exception {
        URI u = new URI(url);
        Properties props = new Properties();
        String info = u.getUserInfo();
        if (info != null) {
            int colon = info.indexOf(':');
            props.setProperty("user", colon < 0 ? info : info.substring(0, colon));
            if (colon >= 0) {
                props.setProperty("password", info.substring(colon + 1));
            }
        }
        String jdbc = "jdbc:postgresql://" + u.getHost() + (u.getPort() > 0 ? ":" + u.getPort() : "") + u.getPath()
                + (u.getRawQuery() != null ? "?" + u.getRawQuery() : "");
        return DriverManager.getConnection(jdbc, props);
    }

    static String env(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? def : v;
    }
}
