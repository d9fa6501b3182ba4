//! Lists and maps deserialized with a limit on their length, refused at the first item beyond
//! it: what they cost is then bounded by the limit, not by how many items a hostile file repeats
//! (a 64 MiB checkpoint header of `1,` would otherwise become 32 million numbers before a single
//! one is checked). Use through a `deserialize_with` function that names the limit.

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// A list of at most `max` items.
pub(crate) fn seq<'de, D, T>(d: D, max: usize, what: &'static str) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_seq(Seq {
        limit: Limit { max, what },
        item: PhantomData,
    })
}

/// A map of at most `max` entries, as `(key, value)` pairs in the text's order.
pub(crate) fn map<'de, D, K, V>(
    d: D,
    max: usize,
    what: &'static str,
) -> Result<Vec<(K, V)>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de>,
    V: Deserialize<'de>,
{
    d.deserialize_map(Map {
        limit: Limit { max, what },
        entry: PhantomData,
    })
}

#[derive(Clone, Copy)]
struct Limit {
    max: usize,
    what: &'static str,
}

impl Limit {
    /// Refuses the item that would make `len + 1`.
    fn check<E: Error>(&self, len: usize) -> Result<(), E> {
        if len == self.max {
            return Err(E::custom(format_args!(
                "{} has more than {} items",
                self.what, self.max
            )));
        }
        Ok(())
    }
}

struct Seq<T> {
    limit: Limit,
    item: PhantomData<T>,
}

struct Map<K, V> {
    limit: Limit,
    entry: PhantomData<(K, V)>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Seq<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a list of at most {} items ({})",
            self.limit.max, self.limit.what
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            self.limit.check(items.len())?;
            items.push(item);
        }
        Ok(items)
    }
}

impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for Map<K, V> {
    type Value = Vec<(K, V)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a map of at most {} entries ({})",
            self.limit.max, self.limit.what
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<(K, V)>, A::Error> {
        let mut items = Vec::new();
        while let Some(entry) = map.next_entry()? {
            self.limit.check(items.len())?;
            items.push(entry);
        }
        Ok(items)
    }
}
