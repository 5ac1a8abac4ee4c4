//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds
//! `migrations/` and `migrations-sqlite/` at compile time, and cargo does not watch those
//! folders by itself.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations-sqlite");
}
