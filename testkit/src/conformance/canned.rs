//! Misbehaving peers for the client tests, on plain `std::net` sockets so that every
//! driver meets the same ones.
